package h1diff

import (
	"fmt"
	"strings"
	"sync"
)

// parsed is one request an origin parsed, or what it failed to parse.
type parsed struct {
	conn   int    // the origin's serial number of the connection
	method string // empty when err says what could not be parsed
	target string
	body   int    // body bytes received (strict Go origin)
	length int    // request line, headers and body (nginx's $request_length)
	err    string // parse or body error
	line   string // the request line of a request the origin rejected (nginx)
}

func (p parsed) String() string {
	s := fmt.Sprintf("conn %d: ", p.conn)
	switch {
	case p.method != "" && p.length > 0:
		s += fmt.Sprintf("%s %s (%d bytes with head)", p.method, p.target, p.length)
	case p.method != "":
		s += fmt.Sprintf("%s %s (%d body bytes)", p.method, p.target, p.body)
	}
	if p.err != "" {
		s += " error: " + p.err
	}
	if p.line != "" {
		s += fmt.Sprintf(", line %q", p.line)
	}
	return s
}

// originLog is what an origin parsed, by the port it was parsed on. Every
// case has its own ports, so its own log, and its own pools of upstream
// connections in both proxies (they pool per destination ip:port).
type originLog struct {
	mu     sync.Mutex
	byPort map[int][]*parsed
}

func (l *originLog) add(port int, p *parsed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byPort == nil {
		l.byPort = map[int][]*parsed{}
	}
	l.byPort[port] = append(l.byPort[port], p)
}

// update changes an entry already added, under the lock.
func (l *originLog) update(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

func (l *originLog) requests(port int) []parsed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []parsed
	for _, p := range l.byPort[port] {
		out = append(out, *p)
	}
	return out
}

// checkOrigin is assertion (a): every request the origin parsed is one the
// client intended (want, "METHOD target"), each at most once.
func checkOrigin(got []parsed, want []string) []string {
	var problems []string
	seen := map[string]bool{}
	for _, p := range got {
		if p.method == "" {
			// A parse error is no request, but a smuggled request line
			// reached the origin even if it then rejected the request.
			if strings.Contains(p.line, "/smuggled") {
				problems = append(problems, fmt.Sprintf("origin rejected, but read the line of, a smuggled request: %s", p))
			}
			continue
		}
		req := p.method + " " + normTarget(p.target)
		switch {
		case strings.Contains(p.target, "/smuggled"):
			problems = append(problems, fmt.Sprintf("origin parsed a smuggled request: %s", p))
		case !contains(want, req):
			problems = append(problems, fmt.Sprintf("origin parsed a request the client did not send as its own: %s", p))
		case seen[req]:
			problems = append(problems, fmt.Sprintf("origin parsed %q more than once: %s", req, p))
		}
		seen[req] = true
	}
	return problems
}

// normTarget reduces an absolute-form target to its path, which is what
// a proxy forwards and what the intended requests name.
func normTarget(target string) string {
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := strings.CutPrefix(target, scheme); ok {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				return rest[i:]
			}
			return "/"
		}
	}
	return target
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
