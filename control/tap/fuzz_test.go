package tap

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/plexus-mesh/plexus/control/api/tapapi"
	sidecartap "github.com/plexus-mesh/plexus/sidecar/tap"
)

// FuzzDecodeRequest: any body is refused with an error or yields a
// request whose values are in range: a rate within the service's bounds,
// header names to redact that are header names, no negative limit, a
// known direction.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`{"direction":"inbound","method":"GET","pathPrefix":"/books","maxEventsPerSecond":300,"limit":5}`,
		`{"fromNamespace":"demo","fromResource":"deployments","fromName":"load","redactHeaders":["x-api-key"]}`,
		`{"maxEventsPerSecond":-1}`,
		`{"maxEventsPerSecond":1e309}`,
		`{"redactHeaders":["bad name"]}`,
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
		if len(req.RedactHeaders) > MaxRedactHeaders {
			t.Errorf("accepted %d headers to redact", len(req.RedactHeaders))
		}
		for _, h := range req.RedactHeaders {
			if !httpguts.ValidHeaderFieldName(h) || len(h) > sidecartap.MaxName || strings.ContainsAny(h, " \r\n") {
				t.Errorf("accepted %q to redact", h)
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
		if again.MaxEventRate != req.MaxEventRate || again.Limit != req.Limit || again.Direction != req.Direction {
			t.Errorf("re-decoded %+v, want %+v", again, req)
		}
	})
}
