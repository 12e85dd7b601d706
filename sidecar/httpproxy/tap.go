package httpproxy

import (
	"net/http"
	"net/netip"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// The observe stage's tap: when a tap session is open (Options.Tap), each
// request is offered to it at its start, and the sessions that took it
// see its response headers and end. With none open, tapStart is one
// atomic load.

// tapStart offers the request to the open tap sessions.
func (x *exchange) tapStart() {
	hub := x.p.opts.Tap
	if !hub.Active() {
		return
	}
	req := x.req
	info := &tap.Info{Direction: req.Direction, Method: req.Method, Scheme: "http",
		Authority: req.Authority, Path: req.Path, Headers: headerLister(req.Header)}
	if req.Client.IsValid() {
		info.Source = netip.AddrPortFrom(req.Client, 0)
	}
	info.Destination = req.Dst
	if req.Direction == metrics.Outbound && x.endpoint.Addr.IsValid() {
		info.Destination = x.endpoint.Addr
	}
	switch {
	case !x.endpoint.Identity.IsZero():
		info.TLS, info.DestinationID = true, x.endpoint.Identity.String()
	case req.TLS.On:
		info.TLS, info.SourceID = true, req.TLS.ID
	}
	if x.rule != nil && x.rule.Route != nil && x.rule.Route.Ref != nil {
		info.Route = x.rule.Route.Ref.GetName()
	}
	x.tap = hub.Start(info)
}

// headerLister lists a request's headers for a tap, whatever the engine.
func headerLister(h HeaderGetter) func(fn func(name, value string)) {
	switch h := h.(type) {
	case http.Header:
		return func(fn func(name, value string)) {
			for k, vv := range h {
				for _, v := range vv {
					fn(k, v)
				}
			}
		}
	case *reqHead:
		return h.each
	}
	return nil
}
