package httpproxy

import (
	"net/http"
	"net/netip"

	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// Request is what the pipeline knows of one HTTP request, whichever
// engine parsed it: the fast path fills it from the raw head, net/http's
// server from its *http.Request.
type Request struct {
	Direction string         // metrics.Inbound or metrics.Outbound
	Dst       netip.AddrPort // the connection's original destination
	Method    string
	Authority string // Host, or :authority for HTTP/2
	Path      string // the request target as received (path and query)
	Header    HeaderGetter
	// ContentLength is the body's length, -1 when unknown (chunked, or
	// HTTP/2 without content-length); Chunked marks HTTP/1 chunked framing.
	ContentLength int64
	Chunked       bool
	GRPC          bool
	// TLS is the mesh TLS the request arrived with (inbound: the verified
	// client proxy's identity).
	TLS metrics.TLS
	// Client is the address the request's connection came from.
	Client netip.Addr
	// Replayable means the whole body is held by the proxy, so the
	// request can be sent again.
	Replayable bool
}

// Route is the request as route rules and authorization policies match
// it: the one conversion, after the pipeline normalized Path.
func (r *Request) Route() routes.Request {
	return routes.Request{Method: r.Method, Authority: r.Authority, Target: r.Path, Header: r.Header, GRPC: r.GRPC}
}

// HeaderGetter reads a request header by name (case-insensitive): the
// first value, or "".
type HeaderGetter interface {
	Get(name string) string
}

// idempotent reports whether the request may be sent again after a
// reused upstream connection failed without answering (net/http's rule).
func (r *Request) idempotent() bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// commonMethods are the methods methodString returns without allocating.
var commonMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodHead,
	http.MethodDelete, http.MethodPatch, http.MethodOptions}

// methodString returns the method as a string without allocating for the
// common ones.
func methodString(b []byte) string {
	for _, m := range commonMethods {
		if string(b) == m {
			return m
		}
	}
	return string(b)
}
