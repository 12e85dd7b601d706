package routes

import "strings"

// Request is what Match looks at.
type Request struct {
	Method string
	// Authority is the Host header or :authority; it may have a port and be
	// in any case.
	Authority string
	// Target is the request target as received: path and optional "?query"
	// (an absolute-form target, "http://host/path?q", is accepted too).
	Target string
	// Header returns a header's first value, "" when absent (so a header
	// match cannot tell an absent header from an empty one). Nil: no
	// headers. With an http.Header, Match does not allocate: the names it
	// asks for are in canonical form.
	Header interface{ Get(name string) string }
	// GRPC: a gRPC request. Only gRPC requests match a GRPCRoute.
	GRPC bool

	// MatchedPrefix is set by Match: the PathPrefix value, as the policy
	// wrote it, of the match that held ("/" for a rule without matches or a
	// match without a path), or "" when that match was not a prefix match.
	// RewriteRequest and Redirect take it for prefix replacement.
	MatchedPrefix string
}

// splitTarget returns the path (never empty) and the raw query of a
// request target.
func splitTarget(t string) (path, query string) {
	if t != "" && t[0] != '/' {
		if i := strings.Index(t, "://"); i >= 0 {
			rest := t[i+3:]
			j := strings.IndexAny(rest, "/?")
			if j < 0 {
				return "/", ""
			}
			t = rest[j:]
		}
	}
	if i := strings.IndexByte(t, '?'); i >= 0 {
		t, query = t[:i], t[i+1:]
	}
	if t == "" {
		t = "/"
	}
	return t, query
}

// maxHost is the longest host name matched against route hostnames (DNS
// allows 253 characters); a longer authority matches only routes without
// hostnames.
const maxHost = 253

// lowerHost writes the host of an authority (no port, no trailing dot,
// lower case) into buf and returns its length, or -1 when it is too long.
func lowerHost(authority string, buf *[maxHost]byte) int {
	h := authority
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if len(h) > maxHost {
		return -1
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return len(h)
}
