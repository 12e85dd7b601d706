package pluginreport

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sendRaw sends b as one datagram, as a buggy or hostile sender would.
func sendRaw(t *testing.T, path string, b []byte) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("sending %d bytes: %v", len(b), err)
	}
}

func TestReceiveGoodGarbageOversized(t *testing.T) {
	l := listen(t)
	good := Report{Command: Add, Outcome: Success, ElapsedMS: 20, DecideMS: 10}
	big, _ := good.Marshal()
	big = append(big[:len(big)-1], []byte(`,"pad":"`+strings.Repeat("x", 4096)+`"}`)...)
	sendRaw(t, l.Path(), []byte("\x00\xffnot json"))
	sendRaw(t, l.Path(), big)
	sendRaw(t, l.Path(), []byte(`{"command":"ADD","outcome":"maybe"}`))
	if err := Send(l.Path(), good); err != nil {
		t.Fatal(err)
	}
	l.SetDeadline(time.Now().Add(time.Second))
	for i, want := range []string{"invalid character", "larger than 512 bytes", `outcome "maybe"`} {
		_, err := l.Receive()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("datagram %d: err = %v, want ErrInvalid mentioning %q", i, err, want)
		}
	}
	if got, err := l.Receive(); err != nil || got != good {
		t.Fatalf("after garbage: %+v, %v; want %+v", got, err, good)
	}
}

func TestListenSocketFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.sock")
	// Left behind by a killed agent: replaced.
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file %v, %v; want mode 0600", fi, err)
	}
	// A new agent takes the path over before the old one closes.
	l2, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := Send(path, Report{Command: Del, Outcome: Success}); err != nil {
		t.Fatalf("closing the old listener broke the new one: %v", err)
	}
	l2.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file still there after Close: %v", err)
	}
	if _, err := l2.Receive(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}

	// Anything but a socket is never removed.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep"), 0o600)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file changed")
	}
	long := filepath.Join(dir, strings.Repeat("x", 120))
	if _, err := Listen(long); err == nil {
		t.Fatal("Listen on a 120+ byte path succeeded")
	}
}
