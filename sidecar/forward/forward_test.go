package forward

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// setup returns the user-side client and server conns with a Join running
// between them; done receives Join's outcome.
type joined struct {
	client, server *net.TCPConn
	res            chan Result
	err            chan error
	up, down       atomic.Int64
}

func setup(t testing.TB, j *Joiner) *joined {
	t.Helper()
	client, proxyIn := tcptest.Pair(t)
	proxyOut, server := tcptest.Pair(t)
	jd := &joined{client: client, server: server, res: make(chan Result, 1), err: make(chan error, 1)}
	go func() {
		r, err := j.Join(proxyIn, proxyOut, Counts{
			ClientToServer: func(n int) { jd.up.Add(int64(n)) },
			ServerToClient: func(n int) { jd.down.Add(int64(n)) },
		})
		jd.res <- r
		jd.err <- err
	}()
	return jd
}

func (jd *joined) wait(t testing.TB) (Result, error) {
	t.Helper()
	select {
	case r := <-jd.res:
		return r, <-jd.err
	case <-time.After(10 * time.Second):
		t.Fatal("Join did not return")
		return Result{}, nil
	}
}

func TestJoinHalfCloseRequestThenResponse(t *testing.T) {
	jd := setup(t, New(time.Minute))
	defer jd.client.Close()
	defer jd.server.Close()
	req := []byte("request body")
	jd.client.Write(req)
	jd.client.CloseWrite()
	// The server sees the request and EOF, then still answers.
	got, err := io.ReadAll(jd.server)
	if err != nil || !bytes.Equal(got, req) {
		t.Fatalf("server read %q, %v", got, err)
	}
	jd.server.Write([]byte("response"))
	jd.server.CloseWrite()
	got, err = io.ReadAll(jd.client)
	if err != nil || string(got) != "response" {
		t.Fatalf("client read %q, %v", got, err)
	}
	r, err := jd.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if r.ClientToServer != int64(len(req)) || r.ServerToClient != 8 || jd.up.Load() != int64(len(req)) || jd.down.Load() != 8 {
		t.Errorf("result %+v, counted up=%d down=%d", r, jd.up.Load(), jd.down.Load())
	}
}

func TestJoinLargeBothWays(t *testing.T) {
	jd := setup(t, New(time.Minute))
	defer jd.client.Close()
	defer jd.server.Close()
	const size = 8 << 20
	send := func(c *net.TCPConn, seed byte) [32]byte {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(buf) {
			rand.Read(buf)
			h.Write(buf)
			if _, err := c.Write(buf); err != nil {
				t.Error(err)
				break
			}
		}
		c.CloseWrite()
		return [32]byte(h.Sum(nil))
	}
	recv := func(c *net.TCPConn) [32]byte {
		h := sha256.New()
		io.Copy(h, c)
		return [32]byte(h.Sum(nil))
	}
	upSum, downSum := make(chan [32]byte, 1), make(chan [32]byte, 1)
	go func() { upSum <- send(jd.client, 1) }()
	go func() { downSum <- send(jd.server, 2) }()
	gotDown := make(chan [32]byte, 1)
	go func() { gotDown <- recv(jd.client) }()
	gotUp := recv(jd.server)
	if gotUp != <-upSum || <-gotDown != <-downSum {
		t.Fatal("payload corrupted")
	}
	r, err := jd.wait(t)
	if err != nil || r.ClientToServer != size || r.ServerToClient != size {
		t.Fatalf("result %+v, %v", r, err)
	}
}

func TestJoinIdleTimeout(t *testing.T) {
	start := time.Now()
	jd := setup(t, New(150*time.Millisecond))
	defer jd.client.Close()
	defer jd.server.Close()
	// Join starts after setup returns, so the whole timeout fits between.
	_, err := jd.wait(t)
	if !errors.Is(err, ErrIdle) {
		t.Fatalf("err = %v, want ErrIdle", err)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 3*time.Second {
		t.Errorf("closed after %s, want about the 150ms idle timeout", el)
	}
	if n, err := jd.client.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("client read after idle close: %d, %v", n, err)
	}
}

func TestJoinOneWayTrafficIsNotIdle(t *testing.T) {
	jd := setup(t, New(200*time.Millisecond))
	defer jd.client.Close()
	defer jd.server.Close()
	go io.Copy(io.Discard, jd.client)
	// The server streams for 3x the idle timeout; the client sends nothing.
	for i := 0; i < 30; i++ {
		if _, err := jd.server.Write([]byte("tick")); err != nil {
			t.Fatalf("write %d: %v (closed as idle while streaming?)", i, err)
		}
		time.Sleep(20 * time.Millisecond) // Sleep: the stream's pace, past the idle timeout in all, on purpose
	}
	jd.server.Close()
	jd.client.Close()
	if _, err := jd.wait(t); errors.Is(err, ErrIdle) {
		t.Fatal("closed as idle while one direction was active")
	}
}

func TestJoinStalledReaderHitsIdle(t *testing.T) {
	jd := setup(t, New(200*time.Millisecond))
	defer jd.client.Close()
	defer jd.server.Close()
	// The server never reads; the client writes until buffers fill.
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := jd.client.Write(buf); err != nil {
				return
			}
		}
	}()
	if _, err := jd.wait(t); !errors.Is(err, ErrIdle) {
		t.Fatalf("err = %v, want ErrIdle", err)
	}
}

func TestJoinServerResetClosesClient(t *testing.T) {
	jd := setup(t, New(time.Minute))
	defer jd.client.Close()
	jd.server.SetLinger(0)
	jd.client.Write([]byte("x"))
	buf := make([]byte, 1)
	io.ReadFull(jd.server, buf)
	jd.server.Close() // RST
	if _, err := jd.wait(t); err == nil {
		t.Error("Join returned nil after a reset")
	}
	jd.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(jd.client); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("client still open after the server reset")
	}
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestJoinNoLeaks runs many pairs through every ending (clean close,
// half-close, reset, idle) and checks goroutines and fds return to baseline.
func TestJoinNoLeaks(t *testing.T) {
	j := New(100 * time.Millisecond)
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	for i := 0; i < 40; i++ {
		jd := setup(t, j)
		switch i % 4 {
		case 0: // clean: both half-close
			jd.client.CloseWrite()
			jd.server.CloseWrite()
		case 1: // client goes away entirely
			jd.client.Close()
		case 2: // server resets
			jd.server.SetLinger(0)
			jd.server.Close()
		case 3: // idle
		}
		jd.wait(t)
		jd.client.Close()
		jd.server.Close()
	}
	var g, fd int
	if !eventually.Holds(5*time.Second, func() bool {
		g, fd = runtime.NumGoroutine(), openFDs(t)
		return g <= baseG && fd <= baseFD
	}) {
		buf := make([]byte, 1<<16)
		t.Fatalf("leak: goroutines %d→%d, fds %d→%d\n%s", baseG, g, baseFD, fd, buf[:runtime.Stack(buf, true)])
	}
}

// failConn records whether Join marked it failed.
type failConn struct {
	*net.TCPConn
	failed atomic.Bool
}

func (f *failConn) Fail() { f.failed.Store(true) }

func TestJoinMarksFailureOnResetOnly(t *testing.T) {
	for _, reset := range []bool{false, true} {
		client, proxyIn := tcptest.Pair(t)
		proxyOut, server := tcptest.Pair(t)
		a, b := &failConn{TCPConn: proxyIn}, &failConn{TCPConn: proxyOut}
		done := make(chan struct{})
		go func() { New(time.Minute).Join(a, b, Counts{}); close(done) }()
		if reset {
			server.SetLinger(0)
			server.Close()
		} else {
			client.CloseWrite()
			server.CloseWrite()
		}
		<-done
		client.Close()
		server.Close()
		if a.failed.Load() != reset || b.failed.Load() != reset {
			t.Errorf("reset=%v: failed = %v/%v", reset, a.failed.Load(), b.failed.Load())
		}
	}
}
