package httpproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

func TestParseGRPCTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true},
		{"2M", 2 * time.Minute, true},
		{"3S", 3 * time.Second, true},
		{"300m", 300 * time.Millisecond, true},
		{"7u", 7 * time.Microsecond, true},
		{"9n", 9, true},
		{"0n", 0, true},
		{"00000001S", time.Second, true}, // 8 digits, leading zeros
		{"99999999H", maxDuration, true}, // past Duration's range: its maximum
		{"99999999n", 99999999 * time.Nanosecond, true},
		{"123456789S", 0, false}, // 9 digits
		{"S", 0, false},
		{"1", 0, false},
		{"", 0, false},
		{"1s", 0, false}, // units are case-sensitive
		{"1h", 0, false},
		{"-1S", 0, false},
		{"+1S", 0, false},
		{" 1S", 0, false},
		{"1 S", 0, false},
		{"1.5S", 0, false},
		{"1SS", 0, false},
	} {
		got, ok := parseGRPCTimeout(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestFormatGRPCTimeout(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{-time.Second, "0n"},
		{0, "0n"},
		{1, "1n"},
		{99_999_999, "99999999n"},
		{100_000_000, "100000u"},
		{100_000_001, "100001u"}, // rounded up, never brought forward
		{300 * time.Millisecond, "300000u"},
		{time.Hour, "3600000m"},
		{100 * 24 * time.Hour, "8640000S"},
		{maxDuration, "2562048H"},
	} {
		if got := formatGRPCTimeout(c.in); got != c.want {
			t.Errorf("formatGRPCTimeout(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzGRPCTimeout checks that parsing never panics, accepts only what the
// grammar allows, and that what the proxy forwards reads back as at
// least the time it had, and less than one unit more.
func FuzzGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1H", "300m", "99999999H", "00000000n", "123456789S", "1s", "-1S"} {
		f.Add(s, int64(300*time.Millisecond))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		if d, ok := parseGRPCTimeout(s); ok {
			if d < 0 || len(s) < 2 || len(s) > 9 {
				t.Fatalf("parseGRPCTimeout(%q) = %v", s, d)
			}
		}
		d := time.Duration(n)
		enc := formatGRPCTimeout(d)
		back, ok := parseGRPCTimeout(enc)
		if !ok {
			t.Fatalf("formatGRPCTimeout(%v) = %q, which does not parse", d, enc)
		}
		unit := time.Nanosecond
		for _, u := range grpcTimeoutUnits {
			if u.unit == enc[len(enc)-1] {
				unit = u.d
			}
		}
		if d > 0 && (back < d || back-d >= unit) {
			t.Fatalf("%v -> %q -> %v", d, enc, back)
		}
	})
}

// TestReplayBodyForSendingAgain: the body sendWith gives the request can
// be had again (GetBody) with every byte until forget, and not after.
func TestReplayBodyForSendingAgain(t *testing.T) {
	b := newReplayBody(io.NopCloser(strings.NewReader("grpc message")))
	out := &http.Request{}
	b.sendWith(out)
	first, _ := io.ReadAll(out.Body)
	again, err := out.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	second, _ := io.ReadAll(again)
	if string(first) != "grpc message" || string(second) != "grpc message" {
		t.Fatalf("sent %q, then %q", first, second)
	}
	b.forget()
	if _, err := out.GetBody(); err == nil {
		t.Fatal("GetBody after forget gave a body")
	}
}

// An upstream that cancels the stream just before the call's deadline
// (its forwarded grpc-timeout ends first) is the deadline; a cancel well
// before it, or another reset, is not.
func TestUpstreamCancelAtTheDeadline(t *testing.T) {
	cancelErr := fmt.Errorf("h2transport: %w", http2.StreamError{StreamID: 1, Code: http2.ErrCodeCancel})
	for _, c := range []struct {
		left time.Duration
		err  error
		want bool
	}{
		{2 * time.Millisecond, cancelErr, true},
		{time.Second, cancelErr, false},
		{2 * time.Millisecond, fmt.Errorf("h2transport: %w", http2.StreamError{StreamID: 1, Code: http2.ErrCodeInternal}), false},
	} {
		ctx, cancel := context.WithTimeoutCause(context.Background(), c.left, errGRPCDeadline)
		got := timeoutCause(ctx, c.err)
		cancel()
		if (got == errGRPCDeadline) != c.want {
			t.Errorf("%v before the deadline, %v: got %v", c.left, c.err, got)
		}
	}
}
