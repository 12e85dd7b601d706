//go:build !linux

package httpproxy

import "syscall"

const peerClosedSupported = false

func peerClosed(syscall.RawConn) bool { return false }
