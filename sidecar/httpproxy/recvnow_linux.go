package httpproxy

import (
	"syscall"
	"unsafe"
)

// recvNow reads what a non-blocking socket holds now, as a raw system
// call (it cannot block).
func recvNow(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
			syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}
