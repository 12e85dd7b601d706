//go:build !linux

package httpproxy

import "syscall"

// recvNow reads what a non-blocking socket holds now.
func recvNow(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_DONTWAIT)
	if e, ok := err.(syscall.Errno); ok {
		return 0, e
	}
	return n, 0
}
