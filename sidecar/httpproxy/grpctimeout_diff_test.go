package httpproxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TestGRPCTimeoutAgainstGRPCGo is the differential test of grpc-timeout
// parsing against grpc-go's server (the reference): each value is sent
// to a real grpc-go server, which either refuses it as malformed or runs
// the call with a deadline; parseGRPCTimeout must accept exactly the
// values grpc-go accepts, and read the same duration.
func TestGRPCTimeoutAgainstGRPCGo(t *testing.T) {
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
		left := "none"
		if dl, ok := s.Context().Deadline(); ok {
			left = strconv.FormatInt(int64(time.Until(dl)), 10)
		}
		s.SetTrailer(metadata.Pairs("left", left))
		return nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()

	for _, v := range []string{
		"1H", "2M", "3S", "300m", "7u", "9n", "00000001S", "99999999H", "99999999M", "99999999n",
		"123456789S", "S", "1", "1s", "1h", "1x", "-1S", "+1S", " 1S", "1 S", "1.5S", "1SS", "1_0S", "0x1S", "١S",
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/pkg.Svc/Call", bytes.NewReader(make([]byte, 5)))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Grpc-Timeout", v)
		got, ok := parseGRPCTimeout(v)
		res, err := tr.RoundTrip(req)
		if err != nil && ok && got < time.Millisecond {
			continue // grpc-go reset the stream: a deadline, passed
		}
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		// A call that ends at once is answered trailers-only: all in the headers.
		field := func(k string) string { return res.Header.Get(k) + res.Trailer.Get(k) }
		status := field("Grpc-Status")
		refused := status == "13" && strings.Contains(field("Grpc-Message"), "grpc-timeout")
		if ok == refused {
			t.Errorf("%q: grpc-go refused it: %v (status %s); parseGRPCTimeout accepts it: %v", v, refused, status, ok)
			continue
		}
		if !ok {
			continue
		}
		if status == "4" && got < time.Millisecond {
			continue // DEADLINE_EXCEEDED before the handler ran: a deadline, passed
		}
		left, err := strconv.ParseInt(field("Left"), 10, 64)
		if err != nil {
			t.Errorf("%q: grpc-go ran the call with no deadline (status %s, left %q)", v, status, field("Left"))
			continue
		}
		if d := got - time.Duration(left); d < 0 || d > time.Second {
			t.Errorf("%q: parseGRPCTimeout reads %v, grpc-go left the call %v", v, got, time.Duration(left))
		}
	}
}
