package inject

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Annotations the injector reads besides the redirect settings the CNI
// plugin shares (podcontract). All live under config.plexus.dev/.
const (
	AnnotationNativeSidecar      = podcontract.AnnotationPrefix + "native-sidecar"
	AnnotationInboundPolicy      = podcontract.AnnotationPrefix + "inbound-policy"
	AnnotationProxyLogLevel      = podcontract.AnnotationPrefix + "proxy-log-level"
	AnnotationProxyCPURequest    = podcontract.AnnotationPrefix + "proxy-cpu-request"
	AnnotationProxyCPULimit      = podcontract.AnnotationPrefix + "proxy-cpu-limit"
	AnnotationProxyMemoryRequest = podcontract.AnnotationPrefix + "proxy-memory-request"
	AnnotationProxyMemoryLimit   = podcontract.AnnotationPrefix + "proxy-memory-limit"
	// AnnotationDefaultInboundPolicy is read by destination (ARCHITECTURE.md §9);
	// the injector only checks its value.
	AnnotationDefaultInboundPolicy = podcontract.AnnotationPrefix + "default-inbound-policy"
)

// DefaultInboundPolicies are the values of AnnotationDefaultInboundPolicy.
var DefaultInboundPolicies = []string{"all-unauthenticated", "all-authenticated", "cluster-authenticated", "cluster-unauthenticated", "deny", "audit"}

// RedirectProbePort is where the kubelet probes the proxy's readiness:
// nothing in the pod listens on it, so the probe's connection reaches the
// proxy only through the inbound REDIRECT rule the CNI plugin wrote. A pod
// whose rules are missing therefore never becomes ready (and, with a native
// sidecar, its app never starts) instead of taking traffic unmeshed.
const RedirectProbePort = 4192

var proxyAnnotations = []string{
	AnnotationNativeSidecar, AnnotationInboundPolicy, AnnotationProxyLogLevel,
	AnnotationProxyCPURequest, AnnotationProxyCPULimit, AnnotationProxyMemoryRequest, AnnotationProxyMemoryLimit,
	AnnotationDefaultInboundPolicy,
}

// settings is one pod's validated mesh configuration.
type settings struct {
	redirect      podcontract.Config
	native        bool
	inboundPolicy string
	logLevel      string
	cpuRequest    resource.Quantity
	cpuLimit      *resource.Quantity
	memRequest    resource.Quantity
	memLimit      resource.Quantity
	// annotations are the config.plexus.dev/* values the pod ends up with:
	// its own, plus the namespace's where it has none.
	annotations map[string]string
	// inboundPorts are the TCP ports the pod's containers declare
	// (PLEXUS_PROXY_INBOUND_PORTS: their inbound policies are asked for at
	// start), "" when none.
	inboundPorts string
	// tap: the proxy serves the tap port (unless a container of the pod
	// declares it: the app's port wins).
	tap bool
}

// merged returns the pod's config.plexus.dev/* annotations with the
// namespace's filled in where the pod has none, except the default
// inbound policy: destination reads the namespace's live, so a change
// there reaches running pods (a copy on the pod, fixed at admission,
// would hold them to the old value).
func merged(pod, ns map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ns {
		if strings.HasPrefix(k, podcontract.AnnotationPrefix) && k != AnnotationDefaultInboundPolicy {
			out[k] = v
		}
	}
	for k, v := range pod {
		if strings.HasPrefix(k, podcontract.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

// parseSettings validates every config.plexus.dev/* annotation in a and
// names the first bad one; an unknown name is an error too (a typo would
// otherwise be silently ignored).
func parseSettings(a map[string]string, def Defaults) (settings, error) {
	known := map[string]bool{}
	for _, k := range append(podcontract.RedirectAnnotations(), proxyAnnotations...) {
		known[k] = true
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] {
			return settings{}, &podcontract.AnnotationError{Annotation: k, Value: a[k], Err: errors.New("unknown setting (see the injector's README for the list)")}
		}
	}
	redirect, err := podcontract.FromAnnotations(podcontract.Defaults(), a)
	if err != nil {
		return settings{}, err
	}
	if err := probeReachable(redirect, a); err != nil {
		return settings{}, err
	}
	s := settings{
		redirect: redirect, native: true, inboundPolicy: "permissive", logLevel: "info",
		cpuRequest: def.CPURequest, cpuLimit: def.CPULimit, memRequest: def.MemoryRequest, memLimit: def.MemoryLimit,
		annotations: a,
	}
	if v, ok := a[AnnotationNativeSidecar]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return settings{}, &podcontract.AnnotationError{Annotation: AnnotationNativeSidecar, Value: v, Err: errors.New(`want "true" or "false"`)}
		}
		s.native = b
	}
	if v, ok := a[AnnotationInboundPolicy]; ok {
		switch v {
		case "permissive", "mtls":
			s.inboundPolicy = v
		default:
			return settings{}, &podcontract.AnnotationError{Annotation: AnnotationInboundPolicy, Value: v, Err: errors.New(`want "permissive" or "mtls"`)}
		}
	}
	if v, ok := a[AnnotationDefaultInboundPolicy]; ok && !slices.Contains(DefaultInboundPolicies, v) {
		return settings{}, &podcontract.AnnotationError{Annotation: AnnotationDefaultInboundPolicy, Value: v,
			Err: errors.New("want one of " + strings.Join(DefaultInboundPolicies, ", "))}
	}
	if v, ok := a[AnnotationProxyLogLevel]; ok {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return settings{}, &podcontract.AnnotationError{Annotation: AnnotationProxyLogLevel, Value: v, Err: errors.New("want debug, info, warn or error")}
		}
		s.logLevel = strings.ToLower(v)
	}
	for _, q := range []struct {
		name string
		dst  *resource.Quantity
	}{
		{AnnotationProxyCPURequest, &s.cpuRequest},
		{AnnotationProxyMemoryRequest, &s.memRequest},
		{AnnotationProxyMemoryLimit, &s.memLimit},
	} {
		if v, ok := a[q.name]; ok {
			parsed, err := quantity(q.name, v)
			if err != nil {
				return settings{}, err
			}
			*q.dst = parsed
		}
	}
	if v, ok := a[AnnotationProxyCPULimit]; ok {
		parsed, err := quantity(AnnotationProxyCPULimit, v)
		if err != nil {
			return settings{}, err
		}
		s.cpuLimit = &parsed
	}
	if s.memRequest.Cmp(s.memLimit) > 0 {
		return settings{}, fmt.Errorf("%s (%s) is above %s (%s)", AnnotationProxyMemoryRequest, s.memRequest.String(), AnnotationProxyMemoryLimit, s.memLimit.String())
	}
	if s.cpuLimit != nil && s.cpuRequest.Cmp(*s.cpuLimit) > 0 {
		return settings{}, fmt.Errorf("%s (%s) is above %s (%s)", AnnotationProxyCPURequest, s.cpuRequest.String(), AnnotationProxyCPULimit, s.cpuLimit.String())
	}
	return s, nil
}

func quantity(name, v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil || q.Sign() <= 0 {
		return resource.Quantity{}, &podcontract.AnnotationError{Annotation: name, Value: v, Err: errors.New("want a positive Kubernetes quantity such as 100m or 64Mi")}
	}
	return q, nil
}

// probeReachable refuses settings under which the kubelet's probe on
// RedirectProbePort could not come through the inbound redirect.
func probeReachable(c podcontract.Config, a map[string]string) error {
	for _, p := range []struct {
		annotation string
		port       uint16
	}{
		{podcontract.AnnotationInboundPort, c.InboundPort},
		{podcontract.AnnotationOutboundPort, c.OutboundPort},
		{podcontract.AnnotationAdminPort, c.AdminPort},
	} {
		if p.port == RedirectProbePort {
			return &podcontract.AnnotationError{Annotation: p.annotation, Value: a[p.annotation],
				Err: fmt.Errorf("port %d is the proxy's redirect probe port", RedirectProbePort)}
		}
	}
	for _, r := range c.SkipInboundPorts {
		if r.Contains(RedirectProbePort) {
			k := podcontract.AnnotationSkipInboundPorts
			return &podcontract.AnnotationError{Annotation: k, Value: a[k],
				Err: fmt.Errorf("port %d must stay redirected: the proxy's readiness probe proves the redirect through it", RedirectProbePort)}
		}
	}
	return nil
}
