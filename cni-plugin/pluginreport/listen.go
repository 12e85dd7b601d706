package pluginreport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/sockfile"
)

// ErrInvalid wraps every datagram Receive rejects.
var ErrInvalid = errors.New("invalid plugin report")

// Listener receives reports on a unix datagram socket.
type Listener struct {
	conn *net.UnixConn
	path string
	file os.FileInfo // the socket file this listener created
	buf  []byte
}

// Listen binds a unix datagram socket at path, mode 0600 (the plugin runs
// as root). A socket file left at path by an earlier listener is replaced;
// any other file there is an error.
func Listen(path string) (*Listener, error) {
	if err := sockfile.Clear(path); err != nil {
		return nil, fmt.Errorf("plugin reports: %w", err)
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("plugin reports: %w", err)
	}
	l := &Listener{conn: conn, path: path, buf: make([]byte, MaxSize+1)}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("plugin reports: %w", err)
	}
	if l.file, err = os.Lstat(path); err != nil {
		l.Close()
		return nil, fmt.Errorf("plugin reports: %w", err)
	}
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Receive waits for the next datagram and parses it. A datagram that is
// not a valid report gives an error wrapping ErrInvalid (read on); any
// other error is the socket's own (net.ErrClosed after Close, or a
// deadline).
func (l *Listener) Receive() (Report, error) {
	n, err := l.conn.Read(l.buf) // a longer datagram is cut to MaxSize+1
	if err != nil {
		return Report{}, err
	}
	r, err := Parse(l.buf[:n])
	if err != nil {
		return Report{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return r, nil
}

// SetDeadline bounds the wait of Receive.
func (l *Listener) SetDeadline(t time.Time) error { return l.conn.SetReadDeadline(t) }

// Close stops receiving and removes the socket file, so that senders see
// ENOENT rather than a socket nobody reads. A socket file that another
// listener has put at the path since (a new agent overlapping the old one)
// is left alone.
func (l *Listener) Close() error {
	err := l.conn.Close()
	if cur, statErr := os.Lstat(l.path); statErr == nil && l.file != nil && os.SameFile(cur, l.file) {
		if rmErr := os.Remove(l.path); rmErr != nil && err == nil {
			err = fmt.Errorf("plugin reports: %w", rmErr)
		}
	}
	return err
}
