package httpproxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopByHop are the connection-specific headers of RFC 9110 §7.6.1 that a
// proxy must not forward, plus the obsolete ones proxies still see.
var hopByHop = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade",
}

// fastPathHopByHop is hopByHop in lower case (the fast path compares
// names with is) without Trailer (hopByHopName says why). It is never
// written after init.
var fastPathHopByHop = func() []string {
	var out []string
	for _, k := range hopByHop {
		if k != "Trailer" {
			out = append(out, strings.ToLower(k))
		}
	}
	return out
}()

// removeHopByHop deletes hop-by-hop headers and every header the
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// keepsTrailersTE reports whether the client sent "TE: trailers", which
// gRPC requires end to end and which is therefore re-added upstream.
func keepsTrailersTE(h http.Header) bool {
	for _, v := range h["Te"] {
		for tok := range strings.SplitSeq(v, ",") {
			if t, _, _ := strings.Cut(textproto.TrimString(tok), ";"); strings.EqualFold(strings.TrimSpace(t), "trailers") {
				return true
			}
		}
	}
	return false
}

// upgradeType returns the Upgrade protocol of an HTTP/1 request whose
// Connection header includes "upgrade", else "".
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}
