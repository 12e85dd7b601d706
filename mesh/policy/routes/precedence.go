package routes

import "sort"

// hostname is a compiled route hostname: an exact name, or for "*.suffix"
// the suffix with its dot (".suffix"), lower case.
type hostname struct {
	name     string
	wildcard bool
}

func hostMatches(hs []hostname, host []byte, valid bool) bool {
	if len(hs) == 0 {
		return true
	}
	if !valid {
		return false
	}
	for _, h := range hs {
		if h.wildcard {
			if len(host) > len(h.name) && string(host[len(host)-len(h.name):]) == h.name {
				return true
			}
		} else if string(host) == h.name {
			return true
		}
	}
	return false
}

// hostIndex groups the entries by the hostname through which they match,
// each group ranked. Match tries the request host's exact group, then its
// wildcard groups from the longest suffix, then the routes without
// hostnames: the most specific hostname wins before anything else.
type hostIndex struct {
	exact    map[string][]entry
	wildcard map[string][]entry // key: ".suffix"
	any      []entry
}

// rank orders entries by Gateway API precedence, highest first: path kind
// Exact > RegularExpression > PathPrefix, then the longer prefix, then a
// method match, then more header matches, then more query matches.
//
// A GRPCRoute's matches are paths too (control/outboundpolicy: service and method
// → Exact "/svc/method", service only → PathPrefix "/svc/", method only
// → a regex); GRPCRoute ranks a matching service before a matching
// method, so for them PathPrefix ranks above a regex.
func rank(a, b *match) int {
	if d := kindRank(a) - kindRank(b); d != 0 {
		return d
	}
	if a.kind == pathPrefix {
		if d := len(a.path) - len(b.path); d != 0 {
			return d
		}
	}
	if d := boolInt(a.method != "") - boolInt(b.method != ""); d != 0 {
		return d
	}
	if d := len(a.headers) - len(b.headers); d != 0 {
		return d
	}
	return len(a.query) - len(b.query)
}

func kindRank(m *match) int {
	switch {
	case m.kind == pathExact:
		return 3
	case m.kind == pathRegex && m.grpcOnly, m.kind == pathPrefix && !m.grpcOnly:
		return 1
	case m.kind == pathRegex, m.kind == pathPrefix:
		return 2
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rankEntries sorts entries, listed in the policy's order, by precedence;
// ties keep the policy's order.
func rankEntries(es []entry) {
	sort.SliceStable(es, func(i, j int) bool { return rank(es[i].m, es[j].m) > 0 })
}

// index lays out the entries of a compiled table: in the listed order for
// a ServiceProfile; ranked in one list when no route has hostnames; else
// in a hostIndex.
func (t *Table) index(entries []entry) {
	if t.profile {
		t.ordered = entries
		return
	}
	hosted := false
	for _, r := range t.Routes {
		hosted = hosted || len(r.hostnames) > 0
	}
	if !hosted {
		rankEntries(entries)
		t.ordered = entries
		return
	}
	x := &hostIndex{exact: map[string][]entry{}, wildcard: map[string][]entry{}}
	for _, e := range entries {
		hs := e.rule.Route.hostnames
		if len(hs) == 0 {
			x.any = append(x.any, e)
		}
		for _, h := range hs {
			if h.wildcard {
				x.wildcard[h.name] = append(x.wildcard[h.name], e)
			} else {
				x.exact[h.name] = append(x.exact[h.name], e)
			}
		}
	}
	for _, es := range x.exact {
		rankEntries(es)
	}
	for _, es := range x.wildcard {
		rankEntries(es)
	}
	rankEntries(x.any)
	t.hosts = x
}
