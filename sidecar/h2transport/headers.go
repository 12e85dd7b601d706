package h2transport

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// checkRequest refuses what cannot be encoded as an HTTP/2 request,
// before the connection's header compression state is touched.
func checkRequest(req *http.Request) error {
	if req.Method == http.MethodConnect {
		return errors.New("h2transport: CONNECT is not supported")
	}
	if req.Method != "" && !validToken(req.Method) {
		return fmt.Errorf("h2transport: invalid method %q", req.Method)
	}
	if !httpguts.ValidHostHeader(authority(req)) {
		return fmt.Errorf("h2transport: invalid authority %q", authority(req))
	}
	for _, h := range []http.Header{req.Header, req.Trailer} {
		for k, vv := range h {
			if !httpguts.ValidHeaderFieldName(k) {
				return fmt.Errorf("h2transport: invalid header name %q", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					return fmt.Errorf("h2transport: invalid value for header %q", k)
				}
			}
		}
	}
	return nil
}

func validToken(s string) bool {
	for i := range len(s) {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

func authority(req *http.Request) string {
	if req.Host != "" {
		return req.Host
	}
	return req.URL.Host
}

// encodeRequest writes req's header block: the pseudo-headers, then the
// fields with lower-case names, without those HTTP/2 forbids (RFC 9113
// §8.2.2) and with no field of our own but content-length and trailer.
func encodeRequest(enc *hpack.Encoder, req *http.Request, hasBody bool) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	scheme := req.URL.Scheme
	if scheme == "" {
		scheme = "http"
	}
	field(enc, ":authority", authority(req))
	field(enc, ":method", method)
	field(enc, ":path", req.URL.RequestURI())
	field(enc, ":scheme", scheme)
	for k, vv := range req.Header {
		name := lowerKey(k)
		switch name {
		case "host", "content-length", "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive", "trailer":
			continue
		case "te":
			for _, v := range vv {
				if strings.EqualFold(v, "trailers") {
					field(enc, "te", "trailers")
					break
				}
			}
			continue
		}
		for _, v := range vv {
			field(enc, name, v)
		}
	}
	if len(req.Trailer) > 0 {
		keys := make([]string, 0, len(req.Trailer))
		for k := range req.Trailer {
			keys = append(keys, lowerKey(k))
		}
		slices.Sort(keys)
		field(enc, "trailer", strings.Join(keys, ","))
	}
	// A known length; or none at all for a POST, PUT or PATCH, which
	// says so (as net/http does). With a body, 0 means unknown.
	cl := req.ContentLength
	if !hasBody {
		cl = 0
	}
	if cl > 0 || cl == 0 && !hasBody && sendsZeroLength(method) {
		field(enc, "content-length", strconv.FormatInt(cl, 10))
	}
}

func sendsZeroLength(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// encodeTrailers writes a trailers block.
func encodeTrailers(enc *hpack.Encoder, trailer http.Header) {
	for k, vv := range trailer {
		name := lowerKey(k)
		for _, v := range vv {
			field(enc, name, v)
		}
	}
}

func field(enc *hpack.Encoder, name, value string) {
	enc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// lowerKey is k in lower case (HTTP/2 field names), without allocating
// when it already is.
func lowerKey(k string) string {
	for i := range len(k) {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(k)
		}
	}
	return k
}

// response builds a response from its header block.
func response(f *http2.MetaHeadersFrame, req *http.Request) (*http.Response, error) {
	status := f.PseudoValue("status")
	code, err := strconv.Atoi(status)
	if len(status) != 3 || err != nil || code < 100 {
		return nil, fmt.Errorf("h2transport: the server sent a malformed :status %q", status)
	}
	res := &http.Response{
		Status: status + " " + http.StatusText(code), StatusCode: code,
		Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: make(http.Header, len(f.RegularFields())), ContentLength: -1, Request: req,
	}
	for _, hf := range f.RegularFields() {
		k := canonicalKey(hf.Name)
		if k == "Trailer" {
			if res.Trailer == nil {
				res.Trailer = http.Header{}
			}
			for _, t := range strings.Split(hf.Value, ",") {
				if t = strings.TrimSpace(t); t != "" {
					res.Trailer[canonicalKey(t)] = nil
				}
			}
			continue
		}
		res.Header[k] = append(res.Header[k], hf.Value)
	}
	if cl := res.Header["Content-Length"]; len(cl) == 1 {
		// A malformed length is ignored, as net/http does: HTTP/2 frames
		// the body itself.
		if n, err := strconv.ParseUint(cl[0], 10, 63); err == nil {
			res.ContentLength = int64(n)
		}
	}
	return res, nil
}

// commonKeys holds the canonical form of the field names most responses
// carry, so that they cost no allocation.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"content-type", "content-length", "date", "server", "grpc-status", "grpc-message",
		"grpc-encoding", "grpc-accept-encoding", "grpc-status-details-bin", "cache-control",
		"content-encoding", "etag", "last-modified", "location", "vary", "x-content-type-options",
		"set-cookie", "accept-ranges", "trailer", "plexus-proxy-error",
	} {
		m[k] = http.CanonicalHeaderKey(k)
	}
	return m
}()

func canonicalKey(name string) string {
	if k, ok := commonKeys[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey(name)
}

func mimeHeader(h http.Header) textproto.MIMEHeader { return textproto.MIMEHeader(h) }
