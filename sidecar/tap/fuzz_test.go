package tap

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/plexus-mesh/plexus/control/api/tappb"
)

// FuzzSession: any request a tapper sends is either refused with an
// error or opens a session whose filter runs on any request.
func FuzzSession(f *testing.F) {
	f.Add("inbound", "GET", "web:80", "/x", "r", "10.0.0.1", "10.0.0.2:80", 10.0, uint32(3), "x-key")
	f.Add("", "", "", "", "", "::1", "[::1]:1", 0.0, uint32(0), "")
	f.Add("inbound", "GET", "h\xff", "/\xc3", "", "", "", 5.0, uint32(0), "x-\xfe")
	f.Fuzz(func(t *testing.T, dir, method, authority, prefix, route, src, dst string, rps float64, limit uint32, redact string) {
		req := &tappb.ObserveRequest{MaxRps: rps, Limit: limit, RedactHeaders: []string{redact},
			Filter: &tappb.Filter{Direction: dir, Method: method, Authority: authority, PathPrefix: prefix, Route: route,
				SourceAddrs: []string{src}, DestinationAddrs: []string{dst}}}
		h := NewHub(nil)
		sub, err := h.Subscribe(req)
		if err != nil {
			return
		}
		defer sub.Close()
		tp := h.Start(&Info{Direction: dir, Method: method, Authority: authority, Path: prefix + "/y", Route: route,
			Source: netip.MustParseAddrPort("10.0.0.1:0"), Destination: netip.MustParseAddrPort("10.0.0.2:80"),
			Headers: func(fn func(string, string)) {
				fn(redact, "secret")
				fn(authority, prefix+route)
			}})
		tp.Response(200)
		tp.End(200, "0", "", 1)
		for len(sub.Events()) > 0 {
			ev := <-sub.Events()
			// Every event must be sendable (protobuf strings are UTF-8)
			// and bounded whatever the request.
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatalf("event cannot be sent: %v", err)
			}
			if len(b) > 16<<10 {
				t.Fatalf("event of %d bytes", len(b))
			}
			for _, hd := range ev.GetRequestStart().GetHeaders() {
				if hd.Value == "secret" && redact != "" {
					t.Fatalf("header %q named for redaction carried its value", redact)
				}
			}
		}
	})
}
