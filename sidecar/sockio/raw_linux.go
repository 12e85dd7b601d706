package sockio

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

const supported = true

type rawConn struct{ rc syscall.RawConn }

// read makes one read(2) once the socket is readable.
func (r rawConn) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			got, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until readable, then again
			}
			n, errno = int(got), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err // deadline or closed, as the poller reports it
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// write sends all of p, waiting for room as needed; MSG_NOSIGNAL turns a
// peer's reset into EPIPE rather than a signal.
func (r rawConn) write(p []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[written])), uintptr(len(p)-written), syscall.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				written += int(n)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until writable, then go on
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	return written, err
}
