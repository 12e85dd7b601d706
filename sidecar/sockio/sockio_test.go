package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// pair returns a wrapped client connection and the server's end.
func pair(t *testing.T) (*Conn, *net.TCPConn) {
	t.Helper()
	c, s := tcptest.Pair(t)
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Skip("raw socket calls not supported here")
	}
	return w, s
}

func TestLargeTransferBothWays(t *testing.T) {
	c, s := pair(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB: writes must wait for room
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(s, int64(len(data))))
		got <- b
	}()
	if n, err := c.Write(data); n != len(data) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("peer read %d bytes, not what was written", len(b))
	}
	go func() { s.Write(data); s.CloseWrite() }()
	b, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("ReadAll = %d bytes, %v", len(b), err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the peer's FIN: %d, %v; want io.EOF", n, err)
	}
}

func TestDeadlineIsATimeout(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read past the deadline: %v, want a net.Error timeout", err)
	}
}

func TestResetAndClose(t *testing.T) {
	c, s := pair(t)
	s.SetLinger(0)
	s.Close() // RST
	// The Read waits for the RST if it has not arrived yet; the deadline
	// only bounds a wait for one that never comes.
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Read after the peer's reset: %v, want ECONNRESET", err)
	}
	var err error
	for range 3 { // the first send may still be accepted
		if _, err = c.Write([]byte("x")); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Write after the peer's reset: %v, want EPIPE or ECONNRESET", err)
	}

	c2, _ := pair(t)
	done := make(chan error, 1)
	go func() { _, err := c2.Read(make([]byte, 1)); done <- err }()
	// Sleep: the Read must be parked in the poller before Close; nothing tells when it is.
	time.Sleep(20 * time.Millisecond)
	c2.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read on a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not wake a blocked Read")
	}
}
