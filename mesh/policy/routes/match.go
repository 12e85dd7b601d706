package routes

import (
	"strings"

	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/mesh/policy/percent"
)

// entry is one (rule, match) pair of the table.
type entry struct {
	rule *Rule
	m    *match
}

type pathKind uint8

const (
	pathPrefix pathKind = iota // also: no path in the match
	pathExact
	pathRegex
	pathNone // a ServiceProfile condition match: no path field
)

// match is a compiled RouteMatch: it holds when every field set holds.
type match struct {
	kind pathKind
	// path: the exact path, or the prefix without its trailing "/".
	path string
	// rawPrefix: the prefix as written ("/" when the match had no path).
	rawPrefix string
	re        *pathRegexp
	method    string
	headers   []valueMatch
	query     []valueMatch
	cond      *condition
	grpcOnly  bool
}

func catchAll() *match { return &match{kind: pathPrefix, rawPrefix: "/"} }

// valueMatch is a header match (name in canonical form) or a query
// parameter match: the value, or a regexp when re is set.
type valueMatch struct {
	name  string
	value string
	re    *valueRegexp
}

func (m *match) matches(r *Request, path, query string) bool {
	if m.grpcOnly && !r.GRPC {
		return false
	}
	switch m.kind {
	case pathExact:
		if path != m.path {
			return false
		}
	case pathPrefix:
		if !prefixMatch(path, m.path) {
			return false
		}
	}
	if m.method != "" && r.Method != m.method {
		return false
	}
	if m.kind == pathRegex && !m.re.match(path) {
		return false
	}
	for i := range m.headers {
		h := &m.headers[i]
		v := ""
		if r.Header != nil {
			v = r.Header.Get(h.name)
		}
		if h.re != nil {
			if !h.re.re.MatchString(v) {
				return false
			}
		} else if v != h.value {
			return false
		}
	}
	for i := range m.query {
		q := &m.query[i]
		raw, ok := queryValue(query, q.name)
		if !ok {
			return false
		}
		if q.re != nil {
			if !matchQueryRegexp(q.re, raw) {
				return false
			}
		} else if !percent.QueryEqual(raw, q.value) {
			return false
		}
	}
	if m.cond != nil && !m.cond.eval(r.Method, path) {
		return false
	}
	return true
}

// prefixMatch: prefix (without a trailing "/") matches path on segment
// boundaries; "" matches every path.
func prefixMatch(path, prefix string) bool {
	return strings.HasPrefix(path, prefix) &&
		(len(path) == len(prefix) || prefix == "" || path[len(prefix)] == '/')
}

// condition is a compiled ServiceProfile condition tree.
type condition struct {
	op     condOp
	method string
	re     *pathRegexp
	subs   []*condition
}

type condOp uint8

const (
	condMethod condOp = iota
	condPath
	condAll // empty: true
	condAny // empty: false
	condNot
	condStatus // response conditions: a status range
)

func (c *condition) eval(method, path string) bool {
	switch c.op {
	case condMethod:
		return method == c.method
	case condPath:
		return c.re.match(path)
	case condAll:
		for _, s := range c.subs {
			if !s.eval(method, path) {
				return false
			}
		}
		return true
	case condAny:
		for _, s := range c.subs {
			if s.eval(method, path) {
				return true
			}
		}
		return false
	default: // condNot
		return !c.subs[0].eval(method, path)
	}
}

// Match returns the rule for r, or ok=false when no route matches (the
// caller answers 404). It sets r.MatchedPrefix. Paths are compared as an
// application reads them, decoded ("/users%3AbatchGet" is
// "/users:batchGet"); the proxy has refused the spellings whose decoding
// could move a segment boundary (pathnorm.Ambiguous) where paths decide.
// It allocates only to decode a path with a "%".
func (t *Table) Match(r *Request) (rule *Rule, ok bool) {
	path, query := splitTarget(r.Target)
	path = pathnorm.Decode(path)
	r.MatchedPrefix = ""
	if t.hosts == nil && !t.profile {
		return scan(t.ordered, r, path, query)
	}
	var buf [maxHost]byte
	n := lowerHost(r.Authority, &buf)
	if t.profile {
		for i := range t.ordered {
			e := &t.ordered[i]
			if hostMatches(e.rule.Route.hostnames, buf[:max(n, 0)], n >= 0) && e.m.matches(r, path, query) {
				return e.rule, e.found(r)
			}
		}
		return nil, false
	}
	x := t.hosts
	if n > 0 {
		if es, found := x.exact[string(buf[:n])]; found {
			if rule, ok := scan(es, r, path, query); ok {
				return rule, ok
			}
		}
		// "*.example.com" is stored as ".example.com": try the host's
		// suffixes from the longest ("a.b.example.com" → ".b.example.com",
		// ".example.com", ".com").
		for i := 1; i < n; i++ {
			if buf[i] != '.' {
				continue
			}
			if es, found := x.wildcard[string(buf[i:n])]; found {
				if rule, ok := scan(es, r, path, query); ok {
					return rule, ok
				}
			}
		}
	}
	return scan(x.any, r, path, query)
}

func scan(es []entry, r *Request, path, query string) (*Rule, bool) {
	for i := range es {
		if es[i].m.matches(r, path, query) {
			return es[i].rule, es[i].found(r)
		}
	}
	return nil, false
}

func (e *entry) found(r *Request) bool {
	if e.m.kind == pathPrefix {
		r.MatchedPrefix = e.m.rawPrefix
	}
	return true
}
