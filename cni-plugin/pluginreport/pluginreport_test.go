package pluginreport

import (
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen starts a Listener in a fresh dir (t.TempDir paths stay well
// under the 108-byte limit of socket paths).
func listen(t testing.TB) *Listener {
	t.Helper()
	l, err := Listen(filepath.Join(t.TempDir(), "r.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestSendIsReceived(t *testing.T) {
	l := listen(t)
	want := Report{Command: Add, Outcome: Error, Code: 102, ElapsedMS: 12.5, DecideMS: 7.25}
	if err := Send(l.Path(), want); err != nil {
		t.Fatal(err)
	}
	l.SetDeadline(time.Now().Add(time.Second))
	got, err := l.Receive()
	if err != nil || got != want {
		t.Fatalf("received %+v, %v; want %+v", got, err, want)
	}
	if b, _ := want.Marshal(); len(b) > 120 {
		t.Errorf("a report takes %d bytes, want about 100: %s", len(b), b)
	}
}

func TestSendWithoutListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.sock")
	start := time.Now()
	err := Send(path, Report{Command: Del, Outcome: Success})
	if !errors.Is(err, ErrNoListener) || !strings.Contains(err.Error(), path) {
		t.Fatalf("no socket: %v, want ErrNoListener naming the path", err)
	}
	// A socket file nobody is bound to any more (an agent that was killed).
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the killed agent's socket file is gone: %v", err)
	}
	err = Send(path, Report{Command: Del, Outcome: Success})
	if !errors.Is(err, ErrNoListener) {
		t.Fatalf("stale socket: %v, want ErrNoListener", err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("sends without a listener took %v", took)
	}
}

// TestSendNeverWaits fills the queue of an agent that does not read: the
// sends that no longer fit fail at once with ErrNoListener (EAGAIN).
func TestSendNeverWaits(t *testing.T) {
	path := listen(t).Path()
	r := Report{Command: Add, Outcome: Skipped, ElapsedMS: 1}
	full := false
	start := time.Now()
	for i := 0; i < 10000 && !full; i++ {
		err := Send(path, r)
		switch {
		case errors.Is(err, ErrNoListener):
			full = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("10000 sends to a socket nobody reads all succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("filling the queue took %v", took)
	}
	t0 := time.Now()
	if err := Send(path, r); !errors.Is(err, ErrNoListener) {
		t.Fatalf("send to a full queue: %v", err)
	}
	if took := time.Since(t0); took > 10*time.Millisecond {
		t.Fatalf("send to a full queue took %v", took)
	}
}

func TestSendToNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.sock")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A regular file where the socket should be refuses the connection.
	if err := Send(path, Report{Command: Add, Outcome: Success}); err == nil {
		t.Fatal("send to a regular file succeeded")
	}
	if err := Send(path, Report{Command: "GC", Outcome: Success}); err == nil || !strings.Contains(err.Error(), "GC") {
		t.Fatalf("invalid report sent: %v", err)
	}
}

func TestParse(t *testing.T) {
	good := map[string]Report{
		`{"command":"ADD","outcome":"success","elapsed_ms":25.1,"decide_ms":12}`:   {Command: Add, Outcome: Success, ElapsedMS: 25.1, DecideMS: 12},
		`{"command":"ADD","outcome":"skipped","elapsed_ms":0.5}`:                   {Command: Add, Outcome: Skipped, ElapsedMS: 0.5},
		`{"command":"DEL","outcome":"error","code":102,"elapsed_ms":3}`:            {Command: Del, Outcome: Error, Code: 102, ElapsedMS: 3},
		`{"command":"CHECK","outcome":"success","elapsed_ms":3,"new_field":[1,2]}`: {Command: Check, Outcome: Success, ElapsedMS: 3},
	}
	for in, want := range good {
		got, err := Parse([]byte(in))
		if err != nil || got != want {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		``:                                      "unexpected end",
		`garbage`:                               "invalid character",
		`[1,2]`:                                 "cannot unmarshal",
		`{}`:                                    "command",
		`{"command":"GC","outcome":"success"}`:  `command "GC"`,
		`{"command":"ADD","outcome":"fine"}`:    `outcome "fine"`,
		`{"command":"DEL","outcome":"skipped"}`: "ADD only",
		`{"command":"ADD","outcome":"error"}`:   "needs a code",
		`{"command":"ADD","outcome":"success","code":7}`:                                      "needs a code",
		`{"command":"ADD","outcome":"error","code":1000}`:                                     "1-999",
		`{"command":"ADD","outcome":"error","code":-1}`:                                       "cannot unmarshal",
		`{"command":"ADD","outcome":"success","elapsed_ms":-1}`:                               "elapsed_ms -1",
		`{"command":"ADD","outcome":"success","elapsed_ms":1e300}`:                            "elapsed_ms",
		`{"command":"ADD","outcome":"success","elapsed_ms":1,"decide_ms":2}`:                  "longer than",
		`{"command":"ADD","outcome":"success","elapsed_ms":"1"}`:                              "cannot unmarshal",
		`{"command":"ADD","outcome":"success","elapsed_ms":1}` + strings.Repeat(" ", MaxSize): "larger than",
	}
	for in, want := range bad {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.60q) err = %v, want one containing %q", in, err, want)
		}
	}
	if err := (Report{Command: Add, Outcome: Success, ElapsedMS: math.NaN()}).Validate(); err == nil {
		t.Error("NaN elapsed accepted")
	}
}

func TestMillis(t *testing.T) {
	if got := Millis(12345678 * time.Nanosecond); got != 12.345 {
		t.Fatalf("Millis = %v", got)
	}
	r := Report{ElapsedMS: 12.5, DecideMS: 0.25}
	if r.Elapsed() != 12500*time.Microsecond || r.Decide() != 250*time.Microsecond {
		t.Fatalf("durations %v %v", r.Elapsed(), r.Decide())
	}
}

// BenchmarkSend is the cost the plugin pays per command for reporting,
// with an agent reading and with no agent at all.
func BenchmarkSend(b *testing.B) {
	r := Report{Command: Add, Outcome: Success, ElapsedMS: 23.456, DecideMS: 12.345}
	b.Run("listener", func(b *testing.B) {
		l := listen(b)
		path := l.Path()
		go func() {
			for {
				if _, err := l.Receive(); errors.Is(err, net.ErrClosed) {
					return
				}
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			if err := Send(path, r); err != nil && !errors.Is(err, ErrNoListener) {
				b.Fatal(err)
			}
		}
	})
	b.Run("no-listener", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "r.sock")
		b.ReportAllocs()
		for b.Loop() {
			if err := Send(path, r); !errors.Is(err, ErrNoListener) {
				b.Fatal(err)
			}
		}
	})
}
