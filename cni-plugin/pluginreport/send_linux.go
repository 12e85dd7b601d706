package pluginreport

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Send writes r as one datagram to the unix datagram socket at path and
// never waits: the socket is non-blocking and the send uses MSG_DONTWAIT,
// so a full queue is EAGAIN at once. Errors that only mean nobody is
// listening (ENOENT, ECONNREFUSED, EAGAIN) wrap ErrNoListener.
func Send(path string, r Report) error {
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("plugin report: socket: %w", err)
	}
	defer unix.Close(fd)
	err = unix.Sendto(fd, b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, &unix.SockaddrUnix{Name: path})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EAGAIN):
		return fmt.Errorf("plugin report to %s: %w (%w)", path, ErrNoListener, err)
	}
	return fmt.Errorf("plugin report to %s: %w", path, err)
}
