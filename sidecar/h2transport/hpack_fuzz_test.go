package h2transport

import (
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// HPACK round trips: request blocks encoded on one connection's encoder,
// one after another (its dynamic table carried over, and resized as a
// server's SETTINGS_HEADER_TABLE_SIZE would), decode to exactly the
// fields meant, in order, with x/net/http2's decoder.
func FuzzHPACKRoundTrip(f *testing.F) {
	f.Add("x-a", "1", "x-a", "2", uint16(4096))
	f.Add("content-type", "application/grpc", "grpc-timeout", "100m", uint16(0))
	f.Add("cookie", "a=b; c=d", "x-long", strings.Repeat("v", 300), uint16(64))
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string, table uint16) {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		dec := hpack.NewDecoder(4096, nil)
		for i, h := range []http.Header{{n1: {v1}}, {n1: {v1}, n2: {v2}}, {n2: {v2, v1}}} {
			req := &http.Request{Method: "POST", Host: "svc.example", URL: &url.URL{Path: "/p"}, Header: h}
			if checkRequest(req) != nil {
				return
			}
			if i == 2 {
				enc.SetMaxDynamicTableSizeLimit(uint32(table))
			}
			buf.Reset()
			encodeRequest(enc, req, false)
			got, err := dec.DecodeFull(buf.Bytes())
			if err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
			want := []string{":authority=svc.example", ":method=POST", ":path=/p", ":scheme=http"}
			var regular []string
			for k, vv := range h {
				name := strings.ToLower(k)
				switch name {
				case "host", "content-length", "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive", "trailer", "te":
					continue
				}
				for _, v := range vv {
					regular = append(regular, name+"="+v)
				}
			}
			var gotPseudo, gotRegular []string
			for _, hf := range got {
				if strings.HasPrefix(hf.Name, ":") {
					gotPseudo = append(gotPseudo, hf.Name+"="+hf.Value)
				} else if hf.Name != "content-length" {
					gotRegular = append(gotRegular, hf.Name+"="+hf.Value)
				}
			}
			if strings.Join(gotPseudo, "\n") != strings.Join(want, "\n") {
				t.Errorf("block %d pseudo-headers %q, want %q", i, gotPseudo, want)
			}
			if !sameFields(gotRegular, regular) {
				t.Errorf("block %d fields %q, want %q", i, gotRegular, regular)
			}
		}
	})
}

// sameFields compares field lists as sets with repeats: a Header map has
// no order across its names (and two of its names may differ only by
// case, and so share a field name).
func sameFields(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
