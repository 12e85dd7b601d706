package routes

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// filterChain holds the compiled filters of a rule or a backend, in the
// policy's order. A rule's redirect is kept apart (Rule.redirect).
type filterChain struct {
	request  []requestFilter
	response []*headerMod
}

func (c *filterChain) empty() bool { return len(c.request) == 0 && len(c.response) == 0 }

// requestFilter is one RequestHeaderModifier (headers) or URLRewrite.
type requestFilter struct {
	headers *headerMod
	rewrite *urlRewrite
}

type headerMod struct {
	set, add []header
	remove   []string
}

// header: name in canonical form.
type header struct{ name, value string }

type pathMod struct {
	kind  pathModKind
	value string
}

type pathModKind uint8

const (
	keepPath pathModKind = iota
	replaceFull
	replacePrefix
)

type urlRewrite struct {
	hostname string
	path     pathMod
}

type redirect struct {
	scheme   string
	hostname string
	port     uint32
	path     pathMod
	status   int
}

// compileFilters compiles the filters of a rule (backend false) or a
// backend. usesPrefix reports a ReplacePrefixMatch, which needs every match
// of the rule to be a PathPrefix match.
func compileFilters(fs []*destinationpb.Filter, backend bool) (c filterChain, rd *redirect, usesPrefix bool, err error) {
	var errs []error
	for i, f := range fs {
		fail := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("filter %d: %s", i, fmt.Sprintf(format, a...)))
		}
		switch k := f.GetKind().(type) {
		case *destinationpb.Filter_RequestHeaderModifier:
			m, err := compileHeaderMod(k.RequestHeaderModifier)
			if err != nil {
				fail("request_header_modifier: %v", err)
				continue
			}
			c.request = append(c.request, requestFilter{headers: m})
		case *destinationpb.Filter_ResponseHeaderModifier:
			m, err := compileHeaderMod(k.ResponseHeaderModifier)
			if err != nil {
				fail("response_header_modifier: %v", err)
				continue
			}
			c.response = append(c.response, m)
		case *destinationpb.Filter_UrlRewrite:
			u := k.UrlRewrite
			if u == nil {
				fail("url_rewrite with nothing set")
				continue
			}
			pm, err := compilePathMod(u.Path)
			if err != nil {
				fail("url_rewrite: %v", err)
				continue
			}
			if u.Hostname == "" && pm.kind == keepPath {
				fail("url_rewrite with nothing set")
				continue
			}
			usesPrefix = usesPrefix || pm.kind == replacePrefix
			c.request = append(c.request, requestFilter{rewrite: &urlRewrite{hostname: u.Hostname, path: pm}})
		case *destinationpb.Filter_RequestRedirect:
			switch {
			case backend:
				fail("request_redirect is not a backend filter")
			case rd != nil:
				fail("a second request_redirect")
			default:
				var err error
				if rd, err = compileRedirect(k.RequestRedirect); err != nil {
					fail("request_redirect: %v", err)
					continue
				}
				usesPrefix = usesPrefix || rd.path.kind == replacePrefix
			}
		default:
			fail("nothing set")
		}
	}
	return c, rd, usesPrefix, errors.Join(errs...)
}

func compileHeaderMod(m *destinationpb.HeaderModifier) (*headerMod, error) {
	if m == nil {
		return nil, errors.New("nothing set")
	}
	var errs []error
	hs := func(in []*destinationpb.Header) []header {
		var out []header
		for _, h := range in {
			if !httpguts.ValidHeaderFieldName(h.GetName()) || !httpguts.ValidHeaderFieldValue(h.GetValue()) {
				errs = append(errs, fmt.Errorf("invalid header %q: %q", h.GetName(), h.GetValue()))
				continue
			}
			out = append(out, header{textproto.CanonicalMIMEHeaderKey(h.Name), h.Value})
		}
		return out
	}
	hm := &headerMod{set: hs(m.Set), add: hs(m.Add)}
	for _, name := range m.Remove {
		if !httpguts.ValidHeaderFieldName(name) {
			errs = append(errs, fmt.Errorf("invalid header name %q", name))
			continue
		}
		hm.remove = append(hm.remove, textproto.CanonicalMIMEHeaderKey(name))
	}
	return hm, errors.Join(errs...)
}

func compilePathMod(p *destinationpb.PathModifier) (pathMod, error) {
	if p == nil {
		return pathMod{}, nil
	}
	var m pathMod
	switch k := p.Kind.(type) {
	case *destinationpb.PathModifier_Full:
		m = pathMod{replaceFull, k.Full}
	case *destinationpb.PathModifier_Prefix:
		m = pathMod{replacePrefix, k.Prefix}
	default:
		return m, errors.New("path with nothing set")
	}
	if !strings.HasPrefix(m.value, "/") && !(m.kind == replacePrefix && m.value == "") {
		return m, fmt.Errorf("path %q does not start with /", m.value)
	}
	return m, nil
}

func compileRedirect(r *destinationpb.RequestRedirect) (*redirect, error) {
	if r == nil {
		return nil, errors.New("nothing set")
	}
	pm, err := compilePathMod(r.Path)
	if err != nil {
		return nil, err
	}
	rd := &redirect{scheme: strings.ToLower(r.Scheme), hostname: r.Hostname, port: r.Port, path: pm, status: int(r.Status)}
	if rd.status == 0 {
		rd.status = http.StatusFound
	}
	switch {
	case rd.scheme != "" && rd.scheme != "http" && rd.scheme != "https":
		return nil, fmt.Errorf("scheme %q", r.Scheme)
	case rd.status < 300 || rd.status > 399:
		return nil, fmt.Errorf("status %d", rd.status)
	case rd.port > 65535:
		return nil, fmt.Errorf("port %d", rd.port)
	}
	return rd, nil
}

// RewriteRequest applies the request filters of the rule, then those of
// the backend b (nil: none), in the policy's order: header modifiers (set,
// then add, then remove; "Host" sets req.Host) and URL rewrites (hostname
// into req.Host, never req.URL.Host, which says where to connect; path into
// req.URL.Path and RawPath, and req.RequestURI when it was set).
// matchedPrefix is the Request.MatchedPrefix that Match returned.
func (r *Rule) RewriteRequest(b *Backend, req *http.Request, matchedPrefix string) {
	r.filters.applyRequest(req, matchedPrefix)
	if b != nil {
		b.filters.applyRequest(req, matchedPrefix)
	}
}

// RewriteResponse applies the ResponseHeaderModifiers of the rule, then of
// the backend b (nil: none), to the response header h.
func (r *Rule) RewriteResponse(b *Backend, h http.Header) {
	r.filters.applyResponse(h)
	if b != nil {
		b.filters.applyResponse(h)
	}
}

func (c *filterChain) applyRequest(req *http.Request, matchedPrefix string) {
	for _, f := range c.request {
		if f.headers != nil {
			f.headers.applyRequest(req)
			continue
		}
		if f.rewrite.hostname != "" {
			req.Host = f.rewrite.hostname
		}
		if f.rewrite.path.kind != keepPath {
			setEscapedPath(req, f.rewrite.path.apply(req.URL.EscapedPath(), matchedPrefix))
		}
	}
}

func (c *filterChain) applyResponse(h http.Header) {
	for _, m := range c.response {
		m.apply(h)
	}
}

func (m *headerMod) applyRequest(req *http.Request) {
	if req.Header == nil {
		req.Header = http.Header{}
	}
	for _, hs := range [2][]header{m.set, m.add} {
		for _, h := range hs {
			if h.name == "Host" {
				req.Host = h.value
			}
		}
	}
	m.apply(req.Header)
}

func (m *headerMod) apply(h http.Header) {
	for _, s := range m.set {
		if s.name != "Host" {
			h[s.name] = []string{s.value}
		}
	}
	for _, a := range m.add {
		if a.name != "Host" {
			h[a.name] = append(h[a.name], a.value)
		}
	}
	for _, name := range m.remove {
		delete(h, name)
	}
}

// apply returns the escaped path after the modification.
func (m pathMod) apply(path, matchedPrefix string) string {
	switch m.kind {
	case replaceFull:
		return m.value
	case replacePrefix:
		return replacePrefixMatch(path, matchedPrefix, m.value)
	}
	return path
}

// replacePrefixMatch replaces the matched prefix of path as Gateway API's
// ReplacePrefixMatch does: on path segments, a trailing "/" of the prefix
// and of the replacement ignored ("/foo/bar", prefix "/foo": "/baz" gives
// "/baz/bar", "/" gives "/bar"; "/foo" with "" gives "/"). A path the
// prefix does not match is left as it is.
func replacePrefixMatch(path, prefix, with string) string {
	prefix = strings.TrimRight(prefix, "/")
	if !prefixMatch(path, prefix) {
		return path
	}
	out := strings.TrimRight(with, "/") + path[len(prefix):]
	if !strings.HasPrefix(out, "/") {
		out = "/" + out
	}
	return out
}

func setEscapedPath(req *http.Request, escaped string) {
	u := req.URL
	if p, err := url.PathUnescape(escaped); err == nil {
		u.Path, u.RawPath = p, escaped
	} else {
		u.Path, u.RawPath = escaped, ""
	}
	if req.RequestURI != "" {
		req.RequestURI = u.RequestURI()
	}
}

// Redirect reports whether the rule redirects req, with the status (301,
// 302, …; 302 when the policy leaves it unset) and the Location. Unset
// parts keep the request's: scheme (req.URL.Scheme, else https with TLS,
// else http), host, path and query. The port: the redirect's, else the
// scheme's default when the redirect sets a scheme, else the request's;
// a scheme's default port is left out of the Location.
func (r *Rule) Redirect(req *http.Request, matchedPrefix string) (status int, location string, ok bool) {
	rd := r.redirect
	if rd == nil {
		return 0, "", false
	}
	scheme := rd.scheme
	if scheme == "" {
		scheme = strings.ToLower(req.URL.Scheme)
		if scheme == "" {
			scheme = "http"
			if req.TLS != nil {
				scheme = "https"
			}
		}
	}
	authority := req.Host
	if authority == "" {
		authority = req.URL.Host
	}
	host, port := splitHostPort(authority)
	if rd.hostname != "" {
		host = rd.hostname
	}
	switch {
	case rd.port != 0:
		port = strconv.Itoa(int(rd.port))
	case rd.scheme != "":
		port = ""
	}
	if port == "80" && scheme == "http" || port == "443" && scheme == "https" {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	loc := scheme + "://" + host + rd.path.apply(req.URL.EscapedPath(), matchedPrefix)
	if req.URL.RawQuery != "" {
		loc += "?" + req.URL.RawQuery
	}
	return rd.status, loc, true
}

// splitHostPort splits an authority into host (IPv6 without brackets) and
// port ("" when none).
func splitHostPort(authority string) (host, port string) {
	if h, p, err := net.SplitHostPort(authority); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), ""
}

// Redirects reports whether the rule answers with a redirect (it then
// needs no backend).
func (r *Rule) Redirects() bool { return r.redirect != nil }
