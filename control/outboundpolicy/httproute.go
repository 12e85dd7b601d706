package outboundpolicy

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// httpRoute translates r, Gateway API defaults applied (a rule without
// matches, or a match without a path, matches the path prefix "/").
func (e *env) httpRoute(r *gatewayv1.HTTPRoute) (*destinationpb.OutboundRoute, problems) {
	var p problems
	settings := e.routeSettings(r.Annotations, &p)
	out := &destinationpb.OutboundRoute{Ref: routeRef(kindHTTPRoute, &r.ObjectMeta), Hostnames: hostnames(r.Spec.Hostnames)}
	for i, rule := range r.Spec.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		or := &destinationpb.OutboundRule{Filters: httpFilters(rule.Filters, at, &p)}
		or.Matches = httpRuleMatches(rule, at, &p)
		checkPrefixRewrite(or, at, &p)
		for j, b := range rule.BackendRefs {
			bat := fmt.Sprintf("%s.backendRefs[%d]", at, j)
			or.Backends = append(or.Backends, e.backend(b.BackendRef, r.Namespace, bat, httpFilters(b.Filters, bat, &p), &p))
		}
		applySettings(or, settings)
		applyGatewayTimeouts(or, rule.Timeouts, at, &p)
		out.Rules = append(out.Rules, or)
	}
	return out, p
}

// httpRuleMatches translates the matches of rule (at names it), the
// Gateway API default applied: no matches matches the path prefix "/".
func httpRuleMatches(rule gatewayv1.HTTPRouteRule, at string, p *problems) []*destinationpb.RouteMatch {
	matches := rule.Matches
	if len(matches) == 0 {
		matches = []gatewayv1.HTTPRouteMatch{{}}
	}
	out := make([]*destinationpb.RouteMatch, 0, len(matches))
	for j, m := range matches {
		out = append(out, httpMatch(m, fmt.Sprintf("%s.matches[%d]", at, j), p))
	}
	return out
}

func routeRef(kind string, meta *metav1.ObjectMeta) *destinationpb.ResourceRef {
	return &destinationpb.ResourceRef{Group: groupGateway, Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
}

func hostnames(hs []gatewayv1.Hostname) []string {
	var out []string
	for _, h := range hs {
		out = append(out, string(h))
	}
	return out
}

func httpMatch(m gatewayv1.HTTPRouteMatch, at string, p *problems) *destinationpb.RouteMatch {
	out := &destinationpb.RouteMatch{Path: &destinationpb.PathMatch{Kind: destinationpb.PathMatch_PREFIX, Value: "/"}}
	if m.Path != nil {
		if m.Path.Value != nil {
			out.Path.Value = *m.Path.Value
		}
		switch pathType(m.Path) {
		case gatewayv1.PathMatchExact:
			out.Path.Kind = destinationpb.PathMatch_EXACT
		case gatewayv1.PathMatchPathPrefix:
		case gatewayv1.PathMatchRegularExpression:
			out.Path.Kind = destinationpb.PathMatch_REGEX
			checkRegex(out.Path.Value, at+".path", p)
		default:
			p.invalidf("%s.path: type %q is not supported", at, *m.Path.Type)
		}
	}
	for i, h := range m.Headers {
		regex := isRegex(h.Type, gatewayv1.HeaderMatchRegularExpression, h.Value, fmt.Sprintf("%s.headers[%d]", at, i), p)
		out.Headers = append(out.Headers, headerMatch(string(h.Name), h.Value, regex))
	}
	for i, q := range m.QueryParams {
		qm := &destinationpb.QueryMatch{Name: string(q.Name), Value: q.Value}
		if isRegex(q.Type, gatewayv1.QueryParamMatchRegularExpression, q.Value, fmt.Sprintf("%s.queryParams[%d]", at, i), p) {
			qm.Kind = destinationpb.QueryMatch_REGEX
		}
		out.Query = append(out.Query, qm)
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	return out
}

func pathType(m *gatewayv1.HTTPPathMatch) gatewayv1.PathMatchType {
	if m.Type == nil {
		return gatewayv1.PathMatchPathPrefix
	}
	return *m.Type
}

// isRegex reads a header or query match type: false for Exact (or
// unset), true for the regular-expression type, whose value must compile;
// any other type is unsupported.
func isRegex[T ~string](typ *T, regexType T, value, at string, p *problems) bool {
	switch {
	case typ == nil || *typ == "Exact":
		return false
	case *typ != regexType:
		p.invalidf("%s: type %q is not supported", at, *typ)
		return false
	}
	checkRegex(value, at, p)
	return true
}

func headerMatch(name, value string, regex bool) *destinationpb.HeaderMatch {
	hm := &destinationpb.HeaderMatch{Name: name, Value: value}
	if regex {
		hm.Kind = destinationpb.HeaderMatch_REGEX
	}
	return hm
}

// checkRegex: the proxy compiles regular expressions as RE2 (Go and Rust
// regexp agree on it).
func checkRegex(re, at string, p *problems) {
	if _, err := regexp.Compile(re); err != nil {
		p.invalidf("%s: invalid regular expression %q: %v", at, re, err)
	}
}

// checkPrefixRewrite: ReplacePrefixMatch needs every match of the rule to
// be a path prefix (Gateway API).
func checkPrefixRewrite(rule *destinationpb.OutboundRule, at string, p *problems) {
	usesPrefix := false
	for _, f := range rule.Filters {
		var path *destinationpb.PathModifier
		switch k := f.Kind.(type) {
		case *destinationpb.Filter_RequestRedirect:
			path = k.RequestRedirect.Path
		case *destinationpb.Filter_UrlRewrite:
			path = k.UrlRewrite.Path
		}
		_, isPrefix := path.GetKind().(*destinationpb.PathModifier_Prefix)
		usesPrefix = usesPrefix || isPrefix
	}
	if !usesPrefix {
		return
	}
	for _, m := range rule.Matches {
		if m.Path.GetKind() != destinationpb.PathMatch_PREFIX {
			p.invalidf("%s: ReplacePrefixMatch needs PathPrefix matches only", at)
			return
		}
	}
}

func httpFilters(fs []gatewayv1.HTTPRouteFilter, at string, p *problems) []*destinationpb.Filter {
	var out []*destinationpb.Filter
	for i, f := range fs {
		if pf := httpFilter(f, fmt.Sprintf("%s.filters[%d]", at, i), p); pf != nil {
			out = append(out, pf)
		}
	}
	return out
}

// httpFilter translates the four filters the proxy applies; any other
// type keeps the route from being Accepted.
func httpFilter(f gatewayv1.HTTPRouteFilter, at string, p *problems) *destinationpb.Filter {
	missing := func(field string) *destinationpb.Filter {
		p.invalidf("%s: type %s without %s", at, f.Type, field)
		return nil
	}
	switch f.Type {
	case gatewayv1.HTTPRouteFilterRequestHeaderModifier:
		if f.RequestHeaderModifier == nil {
			return missing("requestHeaderModifier")
		}
		return &destinationpb.Filter{Kind: &destinationpb.Filter_RequestHeaderModifier{RequestHeaderModifier: headerModifier(f.RequestHeaderModifier)}}
	case gatewayv1.HTTPRouteFilterResponseHeaderModifier:
		if f.ResponseHeaderModifier == nil {
			return missing("responseHeaderModifier")
		}
		return &destinationpb.Filter{Kind: &destinationpb.Filter_ResponseHeaderModifier{ResponseHeaderModifier: headerModifier(f.ResponseHeaderModifier)}}
	case gatewayv1.HTTPRouteFilterRequestRedirect:
		if f.RequestRedirect == nil {
			return missing("requestRedirect")
		}
		return &destinationpb.Filter{Kind: &destinationpb.Filter_RequestRedirect{RequestRedirect: redirect(f.RequestRedirect, at, p)}}
	case gatewayv1.HTTPRouteFilterURLRewrite:
		if f.URLRewrite == nil {
			return missing("urlRewrite")
		}
		rw := &destinationpb.URLRewrite{Path: pathModifier(f.URLRewrite.Path, at+".urlRewrite.path", p)}
		if f.URLRewrite.Hostname != nil {
			rw.Hostname = string(*f.URLRewrite.Hostname)
		}
		return &destinationpb.Filter{Kind: &destinationpb.Filter_UrlRewrite{UrlRewrite: rw}}
	default:
		p.invalidf("%s: filter type %s is not supported", at, f.Type)
		return nil
	}
}

func headerModifier(h *gatewayv1.HTTPHeaderFilter) *destinationpb.HeaderModifier {
	out := &destinationpb.HeaderModifier{Remove: h.Remove}
	for _, s := range h.Set {
		out.Set = append(out.Set, &destinationpb.Header{Name: string(s.Name), Value: s.Value})
	}
	for _, a := range h.Add {
		out.Add = append(out.Add, &destinationpb.Header{Name: string(a.Name), Value: a.Value})
	}
	return out
}

func redirect(r *gatewayv1.HTTPRequestRedirectFilter, at string, p *problems) *destinationpb.RequestRedirect {
	out := &destinationpb.RequestRedirect{Path: pathModifier(r.Path, at+".requestRedirect.path", p), Status: 302}
	if r.Scheme != nil {
		out.Scheme = *r.Scheme
	}
	if r.Hostname != nil {
		out.Hostname = string(*r.Hostname)
	}
	if r.Port != nil {
		out.Port = uint32(*r.Port)
	}
	if r.StatusCode != nil {
		if *r.StatusCode != 301 && *r.StatusCode != 302 {
			p.invalidf("%s.requestRedirect.statusCode: %d is not supported (301 or 302)", at, *r.StatusCode)
		}
		out.Status = uint32(*r.StatusCode)
	}
	return out
}

func pathModifier(m *gatewayv1.HTTPPathModifier, at string, p *problems) *destinationpb.PathModifier {
	if m == nil {
		return nil
	}
	switch {
	case m.Type == gatewayv1.FullPathHTTPPathModifier && m.ReplaceFullPath != nil:
		return &destinationpb.PathModifier{Kind: &destinationpb.PathModifier_Full{Full: *m.ReplaceFullPath}}
	case m.Type == gatewayv1.PrefixMatchHTTPPathModifier && m.ReplacePrefixMatch != nil:
		return &destinationpb.PathModifier{Kind: &destinationpb.PathModifier_Prefix{Prefix: *m.ReplacePrefixMatch}}
	default:
		p.invalidf("%s: type %q without its value is not supported", at, m.Type)
		return nil
	}
}
