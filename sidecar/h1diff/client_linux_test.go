package h1diff

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// readWindow is how long a client reads responses when the connection
// stays open.
const readWindow = 2 * time.Second

// response is one response a client read.
type response struct {
	status int
	source string // "origin", "proxy", or "proxy <plexus-proxy-error>"
	body   string
	cut    bool // the body ended early
}

// clientConn is one client connection through the proxies, the requests
// the client means to send on it ("METHOD target", in order) and what
// came back.
type clientConn struct {
	c     net.Conn
	br    *bufio.Reader
	want  []string
	resps []response
	// end is how reading stopped: "closed", "open" (the read window
	// passed), "upgraded" (a 101) or "unparseable" (errText says why).
	end     string
	errText string
}

// open dials serverIP:port from the client namespace.
func (tp *topology) open(port int, want []string) (*clientConn, error) {
	c, err := tp.dialServer(port)
	if err != nil {
		return nil, err
	}
	return &clientConn{c: c, br: bufio.NewReader(c), want: want}, nil
}

// exchange writes raw on a fresh connection in one write and reads
// responses until EOF or the read window passes; with stopAfter > 0 it
// stops after that many final responses.
func (tp *topology) exchange(port int, raw string, want []string, stopAfter int) (*clientConn, error) {
	cc, err := tp.open(port, want)
	if err != nil {
		return nil, err
	}
	defer cc.c.Close()
	// A write error is not the outcome: the proxy may answer and close
	// before it has read everything (431), and the answer is what counts.
	cc.c.Write([]byte(raw))
	cc.read(time.Now().Add(readWindow), stopAfter)
	return cc, nil
}

// read reads responses until EOF, an error or deadline, or until
// stopAfter (when > 0) final responses have come.
func (cc *clientConn) read(deadline time.Time, stopAfter int) {
	cc.c.SetReadDeadline(deadline)
	for {
		n := len(cc.finals())
		if stopAfter > 0 && n >= stopAfter {
			return
		}
		method := http.MethodGet
		if n < len(cc.want) {
			method, _, _ = strings.Cut(cc.want[n], " ")
		}
		res, err := http.ReadResponse(cc.br, &http.Request{Method: method})
		if err != nil {
			cc.stop(err)
			return
		}
		body, err := io.ReadAll(res.Body)
		// A body delimited by the close may end in a reset as well as a
		// FIN (the proxy closing with unread bytes): both end it.
		closeDelimited := res.ContentLength < 0 && len(res.TransferEncoding) == 0
		cut := err != nil && !(closeDelimited && !errors.Is(err, os.ErrDeadlineExceeded))
		cc.resps = append(cc.resps, response{status: res.StatusCode, source: sourceOf(res), body: string(body), cut: cut})
		if err != nil {
			cc.stop(err)
			return
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			cc.end = "upgraded"
			return
		}
	}
}

func (cc *clientConn) stop(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		cc.end = "open"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		// EOF, or a reset: either way the proxy closed the connection.
		cc.end = "closed"
	default:
		cc.end = "unparseable"
		cc.errText = err.Error()
	}
}

// sourceOf tells the proxy's own answers from the origins': the origins
// mark theirs (X-Origin, nginx's Server), the proxy's errors carry
// plexus-proxy-error, and net/http's 400s for malformed requests carry
// neither.
func sourceOf(res *http.Response) string {
	switch {
	case res.Header.Get("Plexus-Proxy-Error") != "":
		return "proxy " + res.Header.Get("Plexus-Proxy-Error")
	case res.Header.Get("X-Origin") != "", strings.HasPrefix(res.Header.Get("Server"), "nginx"):
		return "origin"
	}
	return "proxy"
}

// finals are the final (non-1xx, and 101) responses.
func (cc *clientConn) finals() []response {
	var out []response
	for _, r := range cc.resps {
		if r.status >= 200 || r.status == http.StatusSwitchingProtocols {
			out = append(out, r)
		}
	}
	return out
}

// answers reports whether r is the response to want: an origin's echo of
// that request, or an empty body where there can be none.
func answers(r response, want string) bool {
	if answered(r.body) == want {
		return true
	}
	method, _, _ := strings.Cut(want, " ")
	return r.body == "" && (method == http.MethodHead || r.status == http.StatusNoContent)
}

// answered returns the request an origin's echo body names, "METHOD
// target", or "".
func answered(body string) string {
	line, _, _ := strings.Cut(body, "\n")
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	return f[0] + " " + normTarget(f[1])
}

// problems is assertion (b): no more final responses than requests, each
// 2xx the answer to its own request, and a request without a response
// only when the connection was closed.
func (cc *clientConn) problems() []string {
	var p []string
	finals := cc.finals()
	if len(finals) > len(cc.want) {
		p = append(p, fmt.Sprintf("%d final responses for %d requests", len(finals), len(cc.want)))
	}
	for i, r := range finals {
		if i >= len(cc.want) {
			break
		}
		if r.status/100 == 2 && !answers(r, cc.want[i]) {
			p = append(p, fmt.Sprintf("response %d (%d) is not the answer to %q: body %q", i+1, r.status, cc.want[i], r.body))
		}
		if r.cut && cc.end == "open" {
			p = append(p, fmt.Sprintf("response %d to %q stopped mid-body with the connection still open", i+1, cc.want[i]))
		}
	}
	if len(finals) < len(cc.want) && cc.end == "open" {
		p = append(p, fmt.Sprintf("%q got no response in %s and the connection is still open", cc.want[len(finals)], readWindow))
	}
	if cc.end == "unparseable" {
		p = append(p, "the client read bytes that are not a response: "+cc.errText)
	}
	return p
}

// outcome summarises the responses and how the connection ended, e.g.
// "200, 200, open" or "400 proxy, closed": a 2xx that answers its own
// request is just its status; anything else names where it came from or
// which request it answered.
func (cc *clientConn) outcome() string {
	var parts []string
	finals := 0
	for i := 0; i < len(cc.resps); i++ {
		r := cc.resps[i]
		if r.status < 200 && r.status != http.StatusSwitchingProtocols {
			n := 1
			for i+1 < len(cc.resps) && cc.resps[i+1].status == r.status {
				i++
				n++
			}
			s := strconv.Itoa(r.status)
			if n > 1 {
				s += fmt.Sprintf("×%d", n)
			}
			parts = append(parts, s)
			continue
		}
		parts = append(parts, cc.label(r, finals))
		finals++
	}
	return strings.Join(append(parts, cc.end), ", ")
}

// label names final response i.
func (cc *clientConn) label(r response, i int) string {
	var s string
	switch {
	case r.status/100 != 2:
		s = fmt.Sprintf("%d %s", r.status, r.source)
	case i < len(cc.want) && answers(r, cc.want[i]):
		s = strconv.Itoa(r.status)
	case answered(r.body) != "":
		s = fmt.Sprintf("%d for %s", r.status, answered(r.body))
	default:
		s = fmt.Sprintf("%d with unexpected body", r.status)
	}
	if r.cut {
		s += " (cut)"
	}
	return s
}

// String is for failure messages: every response in full.
func (cc *clientConn) String() string {
	var b strings.Builder
	for i, r := range cc.resps {
		fmt.Fprintf(&b, "  response %d: %d from %s, body %q", i+1, r.status, r.source, r.body)
		if r.cut {
			b.WriteString(" (cut)")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  then: %s %s", cc.end, cc.errText)
	return b.String()
}
