package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// maxProbeFindings bounds the unauthorized probes one warning names.
const maxProbeFindings = 10

// probes warns about Servers whose inbound policy leaves the HTTP probes
// of meshed pods unauthorized: for each HTTP probe of a meshed pod in a
// namespace with Servers, the policy of the probed port is computed as
// destination computes it, and when a Server (not a default policy)
// decides it, the probe's GET — from a client without mesh identity at
// an address the policy does not know — must get through on the route
// it matches; an HTTPS probe's connection, whose HTTP the proxy does not
// see, by the port's authorizations.
func (c Checker) probes(ctx context.Context) Result {
	title := "Servers let the HTTP probes of their pods through"
	settings, err := c.Policy.Settings(ctx, Namespace)
	if err != nil {
		return fail(title, "check access to the cluster, and destination's args", "%v", err)
	}
	cfg, err := settings.Config()
	if err != nil {
		return fail(title, "fix destination's args", "%v", err)
	}
	snap, err := c.Policy.Snapshot(ctx)
	if err != nil {
		return fail(title, "check access to the cluster", "%v", err)
	}
	var namespaces []string
	for _, s := range snap.Servers {
		if !slices.Contains(namespaces, s.Namespace) {
			namespaces = append(namespaces, s.Namespace)
		}
	}
	var findings []string
	for _, ns := range namespaces {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fail(title, "check access to the cluster", "listing pods in %s: %v", ns, err)
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || !meshpod.IsMeshed(pod) {
				continue
			}
			for _, p := range httpProbes(pod) {
				pol, _, err := snap.Policy(cfg, pod, p.port)
				if err != nil {
					return fail(title, "fix destination's args", "%v", err)
				}
				if pol.GetServer().GetKind() == "default" {
					continue // no Server: the probe route always lets probes through
				}
				if why := probeDenied(pol, pod, p); why != "" && !slices.Contains(findings, why) {
					findings = append(findings, why)
				}
			}
		}
	}
	if len(findings) == 0 {
		return ok(title)
	}
	detail := strings.Join(findings[:min(len(findings), maxProbeFindings)], "; ")
	if len(findings) > maxProbeFindings {
		detail += fmt.Sprintf("; and %d more", len(findings)-maxProbeFindings)
	}
	return Result{Name: title, Status: Warn, Detail: detail,
		Hint: "the kubelet probes without a mesh identity, from an address the policy cannot know: authorize that on the route that takes the probe (or let the probe path fall to the probe route destination adds); an HTTPS probe needs the Server's own authorizations to let it in. plexusctl authz pod/NAME -n NAMESPACE shows the policy"}
}

// httpProbe is one HTTP probe of a pod, its port resolved.
type httpProbe struct {
	port    uint16
	https   bool
	target  string // path and query, as the kubelet sends it
	headers http.Header
}

// httpProbes returns the HTTP probes of pod's containers (init containers
// too, as destination's probe route), each port resolved as the kubelet
// resolves it (a name: the container's port of that name); one whose
// port does not resolve is left out.
func httpProbes(pod *corev1.Pod) []httpProbe {
	var out []httpProbe
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p == nil || p.HTTPGet == nil {
					continue
				}
				port := probePort(c, p.HTTPGet.Port)
				if port == 0 {
					continue
				}
				target := p.HTTPGet.Path
				if !strings.HasPrefix(target, "/") {
					target = "/" + target
				}
				h := http.Header{}
				for _, hv := range p.HTTPGet.HTTPHeaders {
					h.Add(hv.Name, hv.Value)
				}
				out = append(out, httpProbe{port: port, https: p.HTTPGet.Scheme == corev1.URISchemeHTTPS, target: target, headers: h})
			}
		}
	}
	return out
}

func probePort(c corev1.Container, p intstr.IntOrString) uint16 {
	if p.Type == intstr.Int {
		if p.IntVal > 0 && p.IntVal < 65536 {
			return uint16(p.IntVal)
		}
		return 0
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal && cp.ContainerPort > 0 && cp.ContainerPort < 65536 {
			return uint16(cp.ContainerPort)
		}
	}
	return 0
}

// probeDenied says why pol does not let probe p of pod through from an
// unauthenticated client at an unknown address; "" when it does (let
// through and reported, in audit or dry run, counts as through).
func probeDenied(pol *pb.InboundPolicy, pod *corev1.Pod, p httpProbe) string {
	client := inboundpolicy.Client{}
	var verdicts []inboundpolicy.Verdict
	what := "GET " + p.target
	if p.https {
		what = "HTTPS " + what
		verdicts, _ = inboundpolicy.Connection(pol, client)
	} else {
		authority := p.headers.Get("Host")
		if authority == "" && pod.Status.PodIP != "" {
			authority = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.port)))
		}
		verdicts, _ = inboundpolicy.Request(pol, routes.Request{Method: http.MethodGet, Authority: authority, Target: p.target, Header: p.headers}, client)
	}
	// The last verdict holds for an address outside every condition.
	last := verdicts[len(verdicts)-1]
	switch last.Result {
	case inboundpolicy.Allowed, inboundpolicy.Audit, inboundpolicy.DryRun:
		return ""
	}
	why := last.String()
	switch {
	case p.https:
		why += " (TLS: the proxy does not see the request, the port's authorizations decide)"
	case last.Route != nil && last.Route.Kind != "default":
		why += " on " + last.Route.String() + ", which takes it before the probe route"
	}
	if len(verdicts) > 1 {
		var from []string
		for _, v := range verdicts[:len(verdicts)-1] {
			for _, n := range v.IfFrom {
				from = append(from, n.String())
			}
		}
		why += "; let through only from " + strings.Join(from, ", ")
	}
	return fmt.Sprintf("%s, pod %s/%s port %d, %s: %s", inboundpolicy.RefOf(pol.GetServer()), pod.Namespace, pod.Name, p.port, what, why)
}
