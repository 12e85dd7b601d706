//go:build !linux

package httpproxy

import "syscall"

// peekEmpty peeks at a non-blocking socket: true when nothing is waiting.
func peekEmpty(fd uintptr) bool {
	var one [1]byte
	_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == syscall.EAGAIN
}

// recvNow reads what a non-blocking socket holds now.
func recvNow(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_DONTWAIT)
	if e, ok := err.(syscall.Errno); ok {
		return 0, e
	}
	return n, 0
}
