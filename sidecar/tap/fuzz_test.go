package tap

import (
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/plexus-mesh/plexus/mesh/api/tappb"
)

// FuzzSession: any request a tapper sends is either refused with an
// error or opens a session whose filter runs on any request, and whose
// events never carry an always-redacted header's value, nor a default
// secret's that the request did not show.
func FuzzSession(f *testing.F) {
	f.Add("inbound", "GET", "web:80", "/x", "r", "10.0.0.1", "10.0.0.2:80", 10.0, uint32(3), "x-key")
	f.Add("", "", "", "", "", "::1", "[::1]:1", 0.0, uint32(0), "")
	f.Add("inbound", "GET", "h\xff", "/\xc3", "", "", "", 5.0, uint32(0), "x-\xfe")
	f.Fuzz(func(t *testing.T, dir, method, authority, prefix, route, src, dst string, rps float64, limit uint32, redact string) {
		// route is also a name to show, redact one to redact.
		req := &tappb.ObserveRequest{MaxRps: rps, Limit: limit, RedactHeaders: []string{redact},
			RedactQueryParams: []string{redact}, ShowHeaders: []string{route}, ShowQueryParams: []string{route},
			Filter: &tappb.Filter{Direction: dir, Method: method, Authority: authority, PathPrefix: prefix, Route: route,
				SourceAddrs: []string{src}, DestinationAddrs: []string{dst}}}
		h := NewHub(nil)
		sub, err := h.Subscribe(req)
		if err != nil {
			return
		}
		defer sub.Close()
		tp := h.Start(&Info{Direction: dir, Method: method, Authority: authority, Path: prefix + "/y?access_token=tok-secret", Route: route,
			Source: netip.MustParseAddrPort("10.0.0.1:0"), Destination: netip.MustParseAddrPort("10.0.0.2:80"),
			Headers: func(fn func(string, string)) {
				fn(redact, "secret")
				fn("Authorization", "auth-secret")
				fn("X-Api-Key", "key-secret")
				fn(authority, prefix+route)
			}})
		// Whether the request shows x-api-key and access_token (names
		// compare ignoring case, '-' and '_' alike; redacting wins).
		same := func(a, b string) bool {
			return strings.EqualFold(strings.ReplaceAll(a, "_", "-"), strings.ReplaceAll(b, "_", "-"))
		}
		showKey := same(route, "x-api-key") && !same(redact, "x-api-key")
		showToken := same(route, "access_token") && !same(redact, "access_token") ||
			strings.ContainsAny(prefix, "?") || strings.Contains(prefix, "tok-secret")
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
				if hd.Name == "authorization" && hd.Value != Redacted || hd.Name == "x-api-key" && hd.Value == "key-secret" && !showKey {
					t.Fatalf("header %s carried its value (shown: %q, redacted: %q)", hd.Name, route, redact)
				}
			}
			if p := ev.GetRequestStart().GetPath(); strings.Contains(p, "tok-secret") && !showToken {
				t.Fatalf("path %q carried access_token's value (shown: %q, redacted: %q)", p, route, redact)
			}
		}
	})
}
