package httpproxy

import (
	"io"
	"net/http"

	"github.com/plexus-mesh/plexus/sidecar/forward"
)

// tunnel completes an HTTP/1 Upgrade (e.g. WebSocket): it relays the 101
// response, then joins the client and upstream connections.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, res *http.Response, x *exchange, upgrade string) {
	back, ok := res.Body.(io.ReadWriteCloser)
	if !ok || upgrade == "" || res.Header.Get("Upgrade") == "" {
		res.Body.Close()
		p.answerHTTP(w, r, x.fail(errUpgrade))
		return
	}
	x.headers(res.StatusCode)
	defer back.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.finish(res.StatusCode, "", ReasonClientGone)
		return
	}
	defer conn.Close()
	res.Body = nil
	if err := res.Write(brw); err != nil {
		x.finish(res.StatusCode, "", ReasonClientGone)
		return
	}
	if err := brw.Flush(); err != nil {
		x.finish(res.StatusCode, "", ReasonClientGone)
		return
	}
	// Bytes the client sent after its request, already buffered by net/http.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := back.Write(b); err != nil {
			x.finish(res.StatusCode, "", ReasonUpstreamReset)
			return
		}
	}
	// Both sides end together (the upstream stream cannot half-close), on
	// EOF, error or the tunnel idle timeout.
	if _, err := p.tun.Join(conn, back, forward.Counts{}); err != nil {
		p.opts.Log.Debug("upgrade tunnel ended", "direction", p.opts.Direction, "host", r.Host, "err", err)
	}
	x.finish(res.StatusCode, "", "")
}

type upgradeError struct{}

func (upgradeError) Error() string { return "upstream answered 101 without a usable upgrade" }

var errUpgrade error = upgradeError{}
