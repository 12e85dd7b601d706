package routes

import (
	"net/http"
	"net/url"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// specReader turns fuzz bytes into policy parts.
type specReader struct{ b []byte }

func (s *specReader) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *specReader) n(max int) int { return int(s.next()) % max }

var fuzzStrings = []string{"", "/", "/a", "/a/", "/a/b", "/a/[0-9]+", "(", "[", "/(a|b)/c", "^/x.*$",
	"(?i)/A", "a", "web.ns", "*.ns", "*.", "*", "WEB.NS", "GET", "POST", "x-h", "v", "1", "%20", "a b", ".*"}

// str picks a string from fuzzStrings or, with a high first byte, takes
// raw bytes from the spec.
func (s *specReader) str() string {
	c := s.next()
	if c < 200 {
		return fuzzStrings[int(c)%len(fuzzStrings)]
	}
	n := min(int(c-200), len(s.b))
	out := string(s.b[:n])
	s.b = s.b[n:]
	return out
}

func (s *specReader) condition(depth int) *pb.Condition {
	switch k := s.n(6); {
	case k == 0 || depth > 3:
		return &pb.Condition{Kind: &pb.Condition_Method{Method: s.str()}}
	case k == 1:
		return &pb.Condition{Kind: &pb.Condition_PathRegex{PathRegex: s.str()}}
	case k == 2:
		return condAllOf(s.condition(depth+1), s.condition(depth+1))
	case k == 3:
		return condAnyOf(s.condition(depth + 1))
	case k == 4:
		return condNotOf(s.condition(depth + 1))
	}
	return &pb.Condition{}
}

func (s *specReader) pathMod() *pb.PathModifier {
	switch s.n(4) {
	case 1:
		return fullPath(s.str())
	case 2:
		return prefixPath(s.str())
	case 3:
		return &pb.PathModifier{}
	}
	return nil
}

func (s *specReader) filter() *pb.Filter {
	hm := func() *pb.HeaderModifier {
		return &pb.HeaderModifier{
			Set:    []*pb.Header{{Name: s.str(), Value: s.str()}},
			Add:    []*pb.Header{{Name: s.str(), Value: s.str()}},
			Remove: []string{s.str()},
		}
	}
	switch s.n(5) {
	case 0:
		return reqHeaders(hm())
	case 1:
		return respHeaders(hm())
	case 2:
		return rewrite(s.str(), s.pathMod())
	case 3:
		return redirectTo(&pb.RequestRedirect{Scheme: s.str(), Hostname: s.str(), Path: s.pathMod(),
			Port: uint32(s.next()) * 300, Status: uint32(s.n(4)) + 300})
	}
	return &pb.Filter{}
}

func (s *specReader) match() *pb.RouteMatch {
	m := &pb.RouteMatch{}
	if k := s.n(5); k < 4 {
		m.Path = &pb.PathMatch{Kind: pb.PathMatch_Kind(k), Value: s.str()}
	}
	for range s.n(3) {
		m.Headers = append(m.Headers, hdr(pb.HeaderMatch_Kind(s.n(2)), s.str(), s.str()))
	}
	for range s.n(3) {
		m.Query = append(m.Query, qry(pb.QueryMatch_Kind(s.n(2)), s.str(), s.str()))
	}
	if s.n(3) == 0 {
		m.Method = s.str()
	}
	if s.n(4) == 0 {
		m.Condition = s.condition(0)
	}
	return m
}

func (s *specReader) policy() *pb.OutboundPolicy {
	p := &pb.OutboundPolicy{Source: "httproute"}
	if s.n(3) == 0 {
		p.Source = "serviceprofile"
	}
	for ri := range s.n(6) {
		r := route(string(rune('a'+ri)), nil)
		r.Protocol = pb.OutboundRoute_Protocol(s.n(2))
		for range s.n(3) {
			r.Hostnames = append(r.Hostnames, s.str())
		}
		for range 1 + s.n(3) {
			rl := &pb.OutboundRule{}
			for range s.n(3) {
				rl.Matches = append(rl.Matches, s.match())
			}
			for range s.n(3) {
				rl.Filters = append(rl.Filters, s.filter())
			}
			for i := range s.n(3) {
				b := backend(string(rune('a'+i)), uint32(s.n(3)))
				if s.n(4) == 0 {
					b.Filters = []*pb.Filter{s.filter()}
				}
				rl.Backends = append(rl.Backends, b)
			}
			if s.n(3) == 0 {
				rl.Retry = &pb.RetryPolicy{Limit: uint32(s.n(4)), Failures: s.n(2) == 0,
					HttpStatuses: []*pb.StatusRange{{Min: uint32(s.n(700)), Max: uint32(s.n(700))}}, GrpcCodes: []uint32{uint32(s.n(17))}}
			}
			if s.n(3) == 0 {
				rl.ResponseClasses = []*pb.ResponseClass{{Condition: respNot(statusIn(uint32(s.n(600)), uint32(s.n(600)))), IsFailure: s.n(2) == 0}}
			}
			r.Rules = append(r.Rules, rl)
		}
		p.Routes = append(p.Routes, r)
	}
	return p
}

// naiveMatch is Match the slow and obvious way: every (route, rule,
// match) in the policy's order, the best by hostname then rank, or the
// first for a ServiceProfile.
func naiveMatch(t *Table, r *Request) (*Rule, string) {
	path, query := splitTarget(r.Target)
	var buf [maxHost]byte
	n := lowerHost(r.Authority, &buf)
	host := string(buf[:max(n, 0)])
	var best *Rule
	var bestMatch *match
	bestHost := -1
	for _, route := range t.Routes {
		hr := -1 // how specific the route's best hostname is for host
		if len(route.hostnames) == 0 {
			hr = 0
		}
		for _, h := range route.hostnames {
			switch {
			case n < 0:
			case !h.wildcard && host == h.name:
				hr = 1 << 20
			case h.wildcard && len(host) > len(h.name) && host[len(host)-len(h.name):] == h.name:
				hr = max(hr, len(h.name))
			}
		}
		if hr < 0 {
			continue
		}
		for _, rule := range route.Rules {
			for _, m := range rule.matches {
				if !m.matches(r, path, query) {
					continue
				}
				if best == nil || !t.profile && (hr > bestHost || hr == bestHost && rank(m, bestMatch) > 0) {
					best, bestMatch, bestHost = rule, m, hr
				}
			}
		}
	}
	if best == nil {
		return nil, ""
	}
	if bestMatch.kind == pathPrefix {
		return best, bestMatch.rawPrefix
	}
	return best, ""
}

func FuzzMatch(f *testing.F) {
	f.Add([]byte{}, "GET", "web.ns", "/", "v", false)
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, "POST", "a.web.ns:80", "/a/b?v=1", "1", true)
	f.Add([]byte{4, 0, 1, 14, 0, 2, 1, 4, 5, 1, 1, 2, 0, 0, 1, 3, 2, 2, 2, 2}, "GET", "WEB.NS", "/a/1?x-h=%20", "a b", false)
	f.Add([]byte{5, 1, 2, 13, 12, 2, 2, 3, 2, 3, 3, 1, 0, 2, 1, 0, 4, 3, 2, 1, 0, 9, 9, 9}, "GET", "[::1]:80", "http://x/a/?q", "", false)
	f.Add([]byte{200, 210, 'a', '/', '*', 7, 1, 2, 3, 3, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2}, "GET", "x.ns", "*", ".*", true)
	f.Fuzz(func(t *testing.T, spec []byte, method, authority, target, hval string, grpc bool) {
		sr := &specReader{b: spec}
		tb, _ := Compile(sr.policy())
		req := &Request{Method: method, Authority: authority, Target: target, GRPC: grpc,
			Header: http.Header{"X-H": {hval}, "V": {hval}}}
		rule, ok := tb.Match(req)
		want, wantPrefix := naiveMatch(tb, req)
		if rule != want || ok != (want != nil) || req.MatchedPrefix != wantPrefix {
			t.Fatalf("Match = %v %v %q, naive %v %q", rule, ok, req.MatchedPrefix, want, wantPrefix)
		}
		if _, ok := Default().Match(req); !ok {
			t.Fatal("Default does not match")
		}
		if !ok {
			return
		}
		rnd := uint64(len(spec))*0x9e3779b97f4a7c15 + uint64(len(target))
		b := rule.PickBackend(rnd)
		rule.IsFailure(int(rnd%700), hval)
		rule.Retry.Retryable(int(rnd%700), hval)
		Backoff(int(rnd%10), rnd)
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		hr := &http.Request{Method: method, URL: u, Host: authority, Header: http.Header{}, RequestURI: target}
		rule.Redirect(hr, req.MatchedPrefix)
		rule.RewriteRequest(b, hr, req.MatchedPrefix)
		rule.RewriteResponse(b, http.Header{})
	})
}
