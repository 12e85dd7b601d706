package tapservice

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	sidecartap "github.com/plexus-mesh/plexus/sidecar/tap"
)

// FuzzDecodeRequest: any body is refused with an error or yields a
// request whose values are in range: a rate within the service's bounds,
// header names to redact or show that are header names (none always
// redacted among those shown), query parameter names that are names, at
// most MaxRedactionNames of each, no negative limit, a known direction.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`{"direction":"inbound","method":"GET","pathPrefix":"/books","maxEventsPerSecond":300,"limit":5}`,
		`{"fromNamespace":"demo","fromResource":"deployments","fromName":"load","redactHeaders":["x-api-key"]}`,
		`{"maxEventsPerSecond":-1}`,
		`{"maxEventsPerSecond":1e309}`,
		`{"redactHeaders":["bad name"]}`,
		`{"showHeaders":["x-api-key"],"redactQueryParams":["tenant"],"showQueryParams":["code"]}`,
		`{"showHeaders":["Authorization"]}`,
		`{"showQueryParams":["a=b"]}`,
		`{"unknown":1}`,
		`{"limit":-3}`,
		`[1,2]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(bytes.NewReader(body))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if req.MaxEventRate <= 0 || req.MaxEventRate > tapapi.MaxEventRate {
			t.Errorf("accepted rate %v, want (0, %d]", req.MaxEventRate, tapapi.MaxEventRate)
		}
		if req.Limit < 0 {
			t.Errorf("accepted limit %d", req.Limit)
		}
		switch req.Direction {
		case "", "inbound", "outbound":
		default:
			t.Errorf("accepted direction %q", req.Direction)
		}
		for _, names := range [][]string{req.RedactHeaders, req.ShowHeaders, req.RedactQueryParams, req.ShowQueryParams} {
			if len(names) > MaxRedactionNames {
				t.Errorf("accepted %d names to redact or show", len(names))
			}
		}
		for _, h := range append(slices.Clone(req.RedactHeaders), req.ShowHeaders...) {
			if !httpguts.ValidHeaderFieldName(h) || len(h) > sidecartap.MaxName || strings.ContainsAny(h, " \r\n") {
				t.Errorf("accepted header %q to redact or show", h)
			}
		}
		for _, h := range req.ShowHeaders {
			if tapapi.IsAlwaysRedacted(h) {
				t.Errorf("accepted to show %q", h)
			}
		}
		for _, p := range append(slices.Clone(req.RedactQueryParams), req.ShowQueryParams...) {
			if !tapapi.ValidQueryParamName(p) || len(p) > sidecartap.MaxName || strings.ContainsAny(p, " &;=\r\n") {
				t.Errorf("accepted query parameter %q to redact or show", p)
			}
		}
		// What was accepted encodes and decodes to itself.
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRequest(bytes.NewReader(b))
		if err != nil {
			t.Errorf("re-decoding %s: %v", b, err)
		}
		if again.MaxEventRate != req.MaxEventRate || again.Limit != req.Limit || again.Direction != req.Direction ||
			!slices.Equal(again.ShowHeaders, req.ShowHeaders) || !slices.Equal(again.ShowQueryParams, req.ShowQueryParams) ||
			!slices.Equal(again.RedactQueryParams, req.RedactQueryParams) {
			t.Errorf("re-decoded %+v, want %+v", again, req)
		}
	})
}
