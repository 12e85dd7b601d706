package httpproxy

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const peerClosedSupported = true

// peerClosed reports whether the peer of a TCP socket has closed or reset
// it: the socket is in CLOSE_WAIT (FIN received), LAST_ACK or CLOSE.
// Bytes still unread do not hide it, unlike a peek.
func peerClosed(raw syscall.RawConn) bool {
	var state uint8
	raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = info.State
		}
	})
	switch state {
	case tcpClose, tcpCloseWait, tcpLastAck:
		return true
	}
	return false
}

// TCP states of include/net/tcp_states.h.
const (
	tcpClose     = 7
	tcpCloseWait = 8
	tcpLastAck   = 9
)
