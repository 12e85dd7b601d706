package destination

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// serverAuthorizations returns the authorizations of the
// AuthorizationPolicies that target srv or its namespace.
func (in inboundComputation) serverAuthorizations(srv *policyv1alpha1.Server) []*pb.Authorization {
	return in.targetAuthorizations(srv.Namespace, func(t policyv1alpha1.TargetRef) bool {
		return t.IsKind(policyv1alpha1.Group, policyv1alpha1.ServerKind) && t.Name == srv.Name ||
			t.IsKind("", policyv1alpha1.NamespaceKind) && t.Name == srv.Namespace
	})
}

// targetAuthorizations returns one authorization per AuthorizationPolicy
// of namespace ns whose targetRef targets says yes to, by name; a policy
// that authorizes nobody (see authorization) is left out.
func (in inboundComputation) targetAuthorizations(ns string, targets func(policyv1alpha1.TargetRef) bool) []*pb.Authorization {
	var out []*pb.Authorization
	for _, ap := range in.reads.AuthorizationPolicies(ns) {
		if !targets(ap.Spec.TargetRef) {
			continue
		}
		if a := in.authorization(ap); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// authorization turns ap into one Authorization requiring all its
// authentications: a NetworkAuthentication gives the networks, a
// MeshTLSAuthentication or a ServiceAccount the identities (several:
// those in all). None: every client, as in Linkerd. It returns nil, the
// reason logged once, when ap authorizes nobody: an authentication is
// missing, malformed or of an unknown kind, or no identity is left.
func (in inboundComputation) authorization(ap *policyv1alpha1.AuthorizationPolicy) *pb.Authorization {
	nobody := func(why string, args ...any) *pb.Authorization {
		in.warn("AuthorizationPolicy authorizes nobody: "+why, append([]any{"policy", ap.Namespace + "/" + ap.Name}, args...)...)
		return nil
	}
	a := &pb.Authorization{Ref: policyRef(policyv1alpha1.AuthorizationPolicyKind, &ap.ObjectMeta), DryRun: ap.Annotations[AnnotationDryRun] == "true"}
	var ids *identitySet
	for _, ref := range ap.Spec.RequiredAuthenticationRefs {
		ns := cmp.Or(ref.Namespace, ap.Namespace)
		var set identitySet
		switch {
		case ref.IsKind(policyv1alpha1.Group, policyv1alpha1.NetworkAuthenticationKind):
			na, ok := in.reads.NetworkAuthentication(ns, ref.Name)
			if !ok {
				return nobody("a required authentication does not exist", "missing", "NetworkAuthentication "+ns+"/"+ref.Name)
			}
			nets, err := networks(na.Spec.Networks)
			switch {
			case err != nil:
				return nobody("a required NetworkAuthentication is malformed", "authentication", ns+"/"+ref.Name, "error", err)
			case a.Networks != nil:
				return nobody("more than one NetworkAuthentication is required")
			}
			a.Networks = nets
			continue
		case ref.IsKind(policyv1alpha1.Group, policyv1alpha1.MeshTLSAuthenticationKind):
			m, ok := in.reads.MeshTLSAuthentication(ns, ref.Name)
			if !ok {
				return nobody("a required authentication does not exist", "missing", "MeshTLSAuthentication "+ns+"/"+ref.Name)
			}
			set = in.meshIdentities(m)
		case ref.IsKind("", policyv1alpha1.ServiceAccountKind):
			set = identitySet{exact: []string{spiffe.New(in.cfg.TrustDomain, ns, ref.Name).String()}}
		default:
			return nobody("a required authentication is of an unknown kind", "kind", ref.Kind, "group", ref.Group)
		}
		if ids != nil {
			set = intersect(*ids, set)
		}
		ids = &set
	}
	if ids != nil {
		if len(ids.exact) == 0 && len(ids.prefixes) == 0 {
			return nobody("no mesh identity meets every required authentication")
		}
		a.MeshTls, a.Identities, a.Prefixes = true, ids.exact, ids.prefixes
	}
	return a
}

// networks converts a NetworkAuthentication's networks, each cidr or
// except a CIDR or one address, to CIDRs. None is an error: no networks
// would mean any address.
func networks(in []policyv1alpha1.Network) ([]*pb.Network, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no networks")
	}
	out := make([]*pb.Network, 0, len(in))
	for _, n := range in {
		p, err := policyv1alpha1.ParsePrefix(n.CIDR)
		if err != nil {
			return nil, fmt.Errorf("cidr: %w", err)
		}
		pn := &pb.Network{Cidr: p.String()}
		for _, e := range n.Except {
			ep, err := policyv1alpha1.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("except: %w", err)
			}
			pn.Except = append(pn.Except, ep.String())
		}
		out = append(out, pn)
	}
	return out, nil
}

// identitySet is a set of mesh identities: exact SPIFFE IDs, and
// prefixes of SPIFFE IDs ("" for every identity). Sorted, no duplicates.
type identitySet struct {
	exact, prefixes []string
}

// meshIdentities reads a MeshTLSAuthentication. Identities: "*" is every
// identity, "spiffe://..." exact; of the "*.<DNS name>" forms the CRD
// admits, Linkerd's namespace form
// "*.<ns>.serviceaccount.identity.<control-plane-ns>.<trust-domain>"
// with any trust domain (this cluster's or a linked one's) is every
// service account of <ns> there, and any other
// matches no Plexus identity (left out, logged once). identityRefs: a
// ServiceAccount is its identity, a Namespace every service account in
// it.
func (in inboundComputation) meshIdentities(m *policyv1alpha1.MeshTLSAuthentication) identitySet {
	var s identitySet
	for _, id := range m.Spec.Identities {
		switch {
		case id == "*":
			s.prefixes = append(s.prefixes, "")
		case strings.HasPrefix(id, "spiffe://"):
			s.exact = append(s.exact, id)
		default:
			if p, ok := in.linkerdNamespaceForm(id); ok {
				s.prefixes = append(s.prefixes, p)
				continue
			}
			in.warn("MeshTLSAuthentication identity matches no Plexus identity: left out (identities are SPIFFE IDs; for a namespace use identityRefs kind Namespace)",
				"authentication", m.Namespace+"/"+m.Name, "identity", id)
		}
	}
	for _, r := range m.Spec.IdentityRefs {
		switch r.Kind {
		case policyv1alpha1.ServiceAccountKind:
			s.exact = append(s.exact, spiffe.New(in.cfg.TrustDomain, cmp.Or(r.Namespace, m.Namespace), r.Name).String())
		case policyv1alpha1.NamespaceKind:
			s.prefixes = append(s.prefixes, in.namespacePrefix(r.Name))
		default:
			in.warn("MeshTLSAuthentication identityRef of an unknown kind: left out", "authentication", m.Namespace+"/"+m.Name, "kind", r.Kind)
		}
	}
	return identitySet{exact: sortedSet(s.exact), prefixes: sortedSet(s.prefixes)}
}

// namespacePrefix is the prefix of every identity of namespace ns.
func (in inboundComputation) namespacePrefix(ns string) string {
	return namespacePrefix(in.cfg.TrustDomain, ns)
}

func namespacePrefix(td, ns string) string { return "spiffe://" + td + "/ns/" + ns + "/sa/" }

// linkerdNamespaceForm reads "*.<ns>.serviceaccount.identity.<cp>.<td>"
// as the prefix of ns's identities in trust domain td: this cluster's, or
// a linked cluster's (multicluster), whose identities reach this one's
// proxies when both trust one anchor.
func (in inboundComputation) linkerdNamespaceForm(id string) (string, bool) {
	rest, ok1 := strings.CutPrefix(id, "*.")
	ns, rest, ok2 := strings.Cut(rest, ".serviceaccount.identity.")
	_, td, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 || ns == "" || strings.Contains(ns, ".") || td == "" || strings.ContainsAny(td, "/*:") {
		return "", false
	}
	return namespacePrefix(td, ns), true
}

// intersect returns the identities in both a and b: an exact identity of
// one that the other has, and of two prefixes one of which starts with
// the other, the longer.
func intersect(a, b identitySet) identitySet {
	var out identitySet
	for _, pair := range [2][2]identitySet{{a, b}, {b, a}} {
		x, y := pair[0], pair[1]
		for _, id := range x.exact {
			if y.has(id) {
				out.exact = append(out.exact, id)
			}
		}
		for _, p := range x.prefixes {
			if y.hasPrefixOf(p) {
				out.prefixes = append(out.prefixes, p)
			}
		}
	}
	return identitySet{exact: sortedSet(out.exact), prefixes: sortedSet(out.prefixes)}
}

func (s identitySet) has(id string) bool {
	return slices.Contains(s.exact, id) || s.hasPrefixOf(id)
}

// hasPrefixOf reports whether one of s's prefixes starts id.
func (s identitySet) hasPrefixOf(id string) bool {
	return slices.ContainsFunc(s.prefixes, func(p string) bool { return strings.HasPrefix(id, p) })
}

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
