//go:build !linux

package proxy

import "syscall"

// bindAddressNoPort does nothing where the redirect rules do not exist.
func bindAddressNoPort(_, _ string, _ syscall.RawConn) error { return nil }
