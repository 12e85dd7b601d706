package authzreport

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
)

// Report is what authz shows.
type Report struct {
	Kind      Kind   `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Pod is the pod the policies were computed for; "" with
	// PodTemplate (the workload has no pod).
	Pod         string                 `json:"pod,omitempty"`
	PodTemplate bool                   `json:"podTemplate,omitempty"`
	Settings    inboundpolicy.Settings `json:"settings"`
	Client      *ClientInfo            `json:"client,omitempty"`
	Ports       []Port                 `json:"ports"`
	// Notes: what destination would log computing these policies, and
	// what counts as none.
	Notes []string `json:"notes,omitempty"`
}

// ClientInfo is the client of --from.
type ClientInfo struct {
	Name     string `json:"name"`
	Identity string `json:"identity"`
	// Address is --from-ip; "" when not given: networks are conditions.
	Address string `json:"address,omitempty"`
}

// Port is the inbound policy of one port.
type Port struct {
	Port uint16 `json:"port"`
	Name string `json:"name,omitempty"`
	// Server is the Server, or (kind default) the default policy.
	Server   inboundpolicy.Ref `json:"server"`
	Protocol string            `json:"protocol"`
	// Audit: nothing is denied; what would be is reported.
	Audit bool `json:"audit,omitempty"`
	// Authorizations are the port's: they apply to connections and to
	// requests on every route.
	Authorizations []Authorization `json:"authorizations"`
	Routes         []Route         `json:"routes,omitempty"`
	RateLimit      *RateLimit      `json:"rateLimit,omitempty"`
	// Access is what the client of --from gets.
	Access *Access `json:"access,omitempty"`
}

// Authorization lets in clients from its networks (none: any address)
// with, when MeshTLS, a mesh identity among Identities (a trailing *: a
// prefix; none: any).
type Authorization struct {
	Ref        inboundpolicy.Ref       `json:"ref"`
	Networks   []inboundpolicy.Network `json:"networks,omitempty"`
	MeshTLS    bool                    `json:"meshTLS"`
	Identities []string                `json:"identities,omitempty"`
	DryRun     bool                    `json:"dryRun,omitempty"`
}

// Route is an HTTPRoute or GRPCRoute whose parent is the Server, or one
// destination adds (the probe route, the default route beside it). A
// request on it is authorized by its authorizations, then the port's.
type Route struct {
	Ref            inboundpolicy.Ref `json:"ref"`
	Matches        []string          `json:"matches"`
	Authorizations []Authorization   `json:"authorizations"`
}

// RateLimit is the port's HTTPLocalRateLimitPolicy.
type RateLimit struct {
	Ref               inboundpolicy.Ref `json:"ref"`
	TotalPerSecond    uint32            `json:"totalPerSecond,omitempty"`
	IdentityPerSecond uint32            `json:"identityPerSecond,omitempty"`
	Overrides         []Override        `json:"overrides,omitempty"`
}

// Override gives identities their own rate.
type Override struct {
	RequestsPerSecond uint32   `json:"requestsPerSecond"`
	Identities        []string `json:"identities"`
}

// Access is what the client gets: on a connection whose HTTP the proxy
// does not see (opaque TCP, TLS), and for a request on each route. Each
// is a list of verdicts: with conditions (ifFrom) the first that holds
// applies.
type Access struct {
	Connection []inboundpolicy.Verdict `json:"connection"`
	Routes     []RouteAccess           `json:"routes,omitempty"`
	// RateLimit is the requests per second the client may send.
	RateLimit string `json:"rateLimit,omitempty"`
}

// RouteAccess is what a request on one route gets.
type RouteAccess struct {
	Route    inboundpolicy.Ref       `json:"route"`
	Verdicts []inboundpolicy.Verdict `json:"verdicts"`
}

// Render writes r as text (format "" or wide) or as JSON or YAML.
func Render(w io.Writer, r *Report, format string) error {
	if done, err := stat.Encode(w, r, format); done || err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s in namespace %s: ", r.Kind, r.Name, r.Namespace)
	if r.PodTemplate {
		b.WriteString("no pod, its pod template\n")
	} else {
		fmt.Fprintf(&b, "pod %s\n", r.Pod)
	}
	fmt.Fprintf(&b, "destination settings (%s):\n", r.Settings.Source)
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	for _, s := range []struct {
		name string
		s    inboundpolicy.Setting
	}{{"trust domain", r.Settings.TrustDomain}, {"default inbound policy", r.Settings.DefaultInboundPolicy}, {"cluster networks", r.Settings.ClusterNetworks}} {
		from := "from its args"
		if s.s.From == inboundpolicy.FromDefault {
			from = "default"
		}
		fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", s.name, s.s.Value, from)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c := r.Client; c != nil {
		where := "from any address (networks are shown as conditions)"
		if c.Address != "" {
			where = "from " + c.Address
		}
		id := c.Identity
		if id == "" {
			id = "no mesh identity"
		}
		fmt.Fprintf(&b, "client: %s (%s), %s\n", c.Name, id, where)
	}
	if len(r.Ports) == 0 {
		b.WriteString("\nno ports\n")
	}
	for _, p := range r.Ports {
		b.WriteString("\n")
		writePort(&b, p, r.Client)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writePort(b *strings.Builder, p Port, client *ClientInfo) {
	name := fmt.Sprint(p.Port)
	if p.Name != "" {
		name += " (" + p.Name + ")"
	}
	fmt.Fprintf(b, "PORT %s: %s, protocol %s", name, serverText(p.Server), p.Protocol)
	if p.Audit {
		b.WriteString(", audit: denials are let through and reported")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  ROUTE\tMATCHES\tAUTHORIZATION\tNETWORKS\tIDENTITIES\tDRY-RUN")
	rows := func(route, matches string, as []Authorization, none string) {
		if len(as) == 0 {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t-\t-\t-\n", route, matches, none)
		}
		for _, a := range as {
			dry := "no"
			if a.DryRun {
				dry = "yes"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", route, matches, a.Ref, networksText(a.Networks), identitiesText(a), dry)
		}
	}
	none := "none: denied"
	if p.Audit {
		none = "none: reported"
	}
	rows("(port)", "*", p.Authorizations, none)
	for _, r := range p.Routes {
		matches := "*"
		if len(r.Matches) > 0 {
			matches = strings.Join(r.Matches, ", ")
		}
		rows(routeText(r.Ref), matches, r.Authorizations, "(the port's)")
	}
	tw.Flush()
	if rl := p.RateLimit; rl != nil {
		fmt.Fprintf(b, "  rate limit: %s: %s\n", rl.Ref, rateLimitText(rl))
	}
	if a := p.Access; a != nil {
		fmt.Fprintf(b, "  %s gets:\n", client.Name)
		tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "    connection (opaque TCP, TLS)\t%s\n", verdictsText(a.Connection))
		for _, r := range a.Routes {
			fmt.Fprintf(tw, "    request on %s\t%s\n", routeText(r.Route), verdictsText(r.Verdicts))
		}
		if a.RateLimit != "" {
			fmt.Fprintf(tw, "    rate limit\t%s\n", a.RateLimit)
		}
		tw.Flush()
	}
}

// serverText names a port's Server, or its default policy.
func serverText(r inboundpolicy.Ref) string {
	if r.Kind == "default" {
		return "no Server, default policy " + r.Name
	}
	return r.String()
}

// routeText names a route; destination's own are the probe route and
// the default route (every request but the probes).
func routeText(r inboundpolicy.Ref) string {
	if r.Kind == "default" {
		return r.Name + " route"
	}
	return r.String()
}

func networksText(ns []inboundpolicy.Network) string {
	if len(ns) == 0 {
		return "*"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.String()
	}
	return strings.Join(s, ", ")
}

func identitiesText(a Authorization) string {
	switch {
	case !a.MeshTLS:
		return "any, or plaintext"
	case len(a.Identities) == 0:
		return "any mesh identity"
	}
	return strings.Join(a.Identities, ", ")
}

func rateLimitText(rl *RateLimit) string {
	var parts []string
	if rl.TotalPerSecond > 0 {
		parts = append(parts, fmt.Sprintf("%d/s total", rl.TotalPerSecond))
	}
	if rl.IdentityPerSecond > 0 {
		parts = append(parts, fmt.Sprintf("%d/s per identity", rl.IdentityPerSecond))
	}
	for _, o := range rl.Overrides {
		parts = append(parts, fmt.Sprintf("%d/s for %s", o.RequestsPerSecond, strings.Join(o.Identities, ", ")))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, "; ")
}

func verdictsText(vs []inboundpolicy.Verdict) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
		if i > 0 && len(vs[i].IfFrom) == 0 {
			parts[i] = "otherwise " + parts[i]
		}
	}
	return strings.Join(parts, "; ")
}
