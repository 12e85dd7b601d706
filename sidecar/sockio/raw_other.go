//go:build !linux

package sockio

import (
	"errors"
	"syscall"
)

const supported = false

type rawConn struct{ rc syscall.RawConn }

var errUnsupported = errors.New("sockio: raw socket calls are Linux only")

func (rawConn) read([]byte) (int, error)  { return 0, errUnsupported }
func (rawConn) write([]byte) (int, error) { return 0, errUnsupported }
