package tapservice

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// target is what a tap names: resource/name in namespace (resource
// "namespaces": the namespace itself, name = namespace).
type target struct {
	namespace, resource, name string
}

// parsePath reads a tap's URL path (tapapi.Path).
func parsePath(p string) (target, bool) {
	prefix := "/apis/" + tapapi.Group + "/" + tapapi.Version + "/watch/namespaces/"
	rest, ok := strings.CutPrefix(p, prefix)
	if !ok {
		return target{}, false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 2 && parts[1] == tapapi.Subresource && parts[0] != "":
		return target{namespace: parts[0], resource: "namespaces", name: parts[0]}, true
	case len(parts) == 4 && parts[3] == tapapi.Subresource && parts[0] != "" && parts[2] != "" && slices.Contains(tapapi.Resources, parts[1]) && parts[1] != "namespaces":
		return target{namespace: parts[0], resource: parts[1], name: parts[2]}, true
	}
	return target{}, false
}

// MaxPods bounds the pods one tap fans out to.
const MaxPods = 100

// pods returns the running pods t selects.
func pods(ctx context.Context, kube kubernetes.Interface, t target) ([]corev1.Pod, error) {
	core := kube.CoreV1()
	var sel labels.Selector
	switch t.resource {
	case "namespaces":
		sel = labels.Everything()
	case "pods":
		p, err := core.Pods(t.namespace).Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []corev1.Pod{*p}, nil
	case "services":
		s, err := core.Services(t.namespace).Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(s.Spec.Selector) == 0 {
			return nil, fmt.Errorf("service %s/%s has no selector", t.namespace, t.name)
		}
		sel = labels.SelectorFromSet(s.Spec.Selector)
	case "cronjobs":
		// A CronJob's pods are its Jobs' pods.
		if _, err := kube.BatchV1().CronJobs(t.namespace).Get(ctx, t.name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
		jobs, err := kube.BatchV1().Jobs(t.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []corev1.Pod
		for _, j := range jobs.Items {
			if owned(j.OwnerReferences, "CronJob", t.name) {
				ps, err := pods(ctx, kube, target{t.namespace, "jobs", j.Name})
				if err != nil {
					return nil, err
				}
				out = append(out, ps...)
			}
		}
		return out, nil
	default:
		ls, err := workloadSelector(ctx, kube, t)
		if err != nil {
			return nil, err
		}
		if sel, err = metav1.LabelSelectorAsSelector(ls); err != nil {
			return nil, fmt.Errorf("%s %s/%s: selector: %w", t.resource, t.namespace, t.name, err)
		}
	}
	list, err := core.Pods(t.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// workloadSelector returns a workload's pod selector.
func workloadSelector(ctx context.Context, kube kubernetes.Interface, t target) (*metav1.LabelSelector, error) {
	get, apps := metav1.GetOptions{}, kube.AppsV1()
	switch t.resource {
	case "deployments":
		o, err := apps.Deployments(t.namespace).Get(ctx, t.name, get)
		return selector(err, func() *metav1.LabelSelector { return o.Spec.Selector })
	case "statefulsets":
		o, err := apps.StatefulSets(t.namespace).Get(ctx, t.name, get)
		return selector(err, func() *metav1.LabelSelector { return o.Spec.Selector })
	case "daemonsets":
		o, err := apps.DaemonSets(t.namespace).Get(ctx, t.name, get)
		return selector(err, func() *metav1.LabelSelector { return o.Spec.Selector })
	case "replicasets":
		o, err := apps.ReplicaSets(t.namespace).Get(ctx, t.name, get)
		return selector(err, func() *metav1.LabelSelector { return o.Spec.Selector })
	case "jobs":
		o, err := kube.BatchV1().Jobs(t.namespace).Get(ctx, t.name, get)
		return selector(err, func() *metav1.LabelSelector { return o.Spec.Selector })
	}
	return nil, fmt.Errorf("cannot tap %s", t.resource)
}

// selector returns what spec returns, unless the Get that fetched the
// workload failed with err.
func selector(err error, spec func() *metav1.LabelSelector) (*metav1.LabelSelector, error) {
	if err != nil {
		return nil, err
	}
	return spec(), nil
}

func owned(refs []metav1.OwnerReference, kind, name string) bool {
	for _, r := range refs {
		if r.Kind == kind && r.Name == name {
			return true
		}
	}
	return false
}

// tapPort returns the port a pod's proxy serves tap on, 0 when the pod
// has no proxy or one injected before tap existed.
func tapPort(p *corev1.Pod) int32 {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if c.Name != meshpod.ProxyContainerName {
				continue
			}
			for _, port := range c.Ports {
				if port.Name == meshpod.TapPortName {
					return port.ContainerPort
				}
			}
		}
	}
	return 0
}

// podIPs are a pod's IPs, every family.
func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.String())
		}
	}
	if len(out) == 0 {
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out = append(out, a.String())
		}
	}
	return out
}

// podAddr is a running pod's IP.
func podAddr(p *corev1.Pod) (netip.Addr, bool) {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(p.Status.PodIP)
	return a, err == nil
}

// peerAddrs resolves a tap's "to" and "from" filters to the addresses its
// requests go to and come from (nil: any). home is the tapped target's
// namespace; in any other, an end is resolved only when may says that the
// caller may read what it names (authz.go, "Filter rights"), and answered
// as missing (notFoundError) when not.
func peerAddrs(ctx context.Context, kube kubernetes.Interface, may rightsFunc, home string, r tapapi.Request) (dsts, srcs []string, err error) {
	to := end{field: "to", namespace: r.ToNamespace, resource: r.ToResource, name: r.ToName, selector: r.ToSelector, addrs: r.ToAddrs}
	from := end{field: "from", namespace: r.FromNamespace, resource: r.FromResource, name: r.FromName, selector: r.FromSelector, addrs: r.FromAddrs}
	if dsts, err = to.resolve(ctx, kube, may, home); err != nil {
		return nil, nil, err
	}
	srcs, err = from.resolve(ctx, kube, may, home)
	return dsts, srcs, err
}

// end is one end of a tap's filter; field ("to", "from") names it in
// errors.
type end struct {
	field                               string
	namespace, resource, name, selector string
	addrs                               []string
}

// resolve returns the end's addresses: the IPs of the pods it selects,
// for a destination Service its cluster IPs too (which outbound requests
// are addressed to), and the addresses it lists. nil: the end is not
// set.
func (e end) resolve(ctx context.Context, kube kubernetes.Interface, may rightsFunc, home string) ([]string, error) {
	if err := e.checkAddrs(); err != nil {
		return nil, err
	}
	out := slices.Clone(e.addrs)
	if e.namespace != "" || e.resource != "" || e.selector != "" {
		pods, err := e.podAddrs(ctx, kube, may, home)
		if err != nil {
			return nil, err
		}
		out = append(out, pods...)
	} else if len(out) == 0 {
		return nil, nil
	}
	if len(out) > MaxPeerAddrs {
		return nil, fmt.Errorf("%s: %d addresses; a tap filters on at most %d: name a smaller set", e.field, len(out), MaxPeerAddrs)
	}
	if len(out) == 0 {
		out = []string{"0.0.0.0"} // nothing to match: no event, rather than every one
	}
	return out, nil
}

// checkAddrs checks the end's own addresses: IPs, or for a destination
// IP:ports too (the proxies know a client's address but not its port).
func (e end) checkAddrs() error {
	if len(e.addrs) > MaxPeerAddrs {
		return fmt.Errorf("%sAddrs: %d addresses, want at most %d", e.field, len(e.addrs), MaxPeerAddrs)
	}
	want := "an IP or IP:port"
	if e.field == "from" {
		want = "an IP (a source's port is not known)"
	}
	for _, a := range e.addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil && e.field == "to" {
			var ap netip.AddrPort
			ap, err = netip.ParseAddrPort(a)
			ip = ap.Addr()
		}
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("%sAddrs: %q is not %s", e.field, a, want)
		}
	}
	return nil
}

// podAddrs returns the IPs of the running pods the end selects: first,
// outside home, only if the caller may read them; a missing object, or one
// the caller may not read, is the same notFoundError.
func (e end) podAddrs(ctx context.Context, kube kubernetes.Interface, may rightsFunc, home string) ([]string, error) {
	if e.namespace == "" {
		return nil, fmt.Errorf("%sResource %q and %sSelector %q need %sNamespace", e.field, e.resource, e.field, e.selector, e.field)
	}
	sel, err := labels.Parse(e.selector)
	if err != nil {
		return nil, fmt.Errorf("%sSelector %q: %w", e.field, e.selector, err)
	}
	t := target{namespace: e.namespace, resource: e.resource, name: e.name}
	if t.resource == "" || t.resource == "namespaces" {
		t = target{namespace: e.namespace, resource: "namespaces", name: e.namespace}
	} else if !slices.Contains(tapapi.Resources, t.resource) || t.name == "" {
		return nil, fmt.Errorf("%sResource %q %sName %q: want one of %s and a name", e.field, e.resource, e.field, e.name, strings.Join(tapapi.Resources, ", "))
	}
	if e.namespace != home {
		ok, err := may(ctx, readsOf(t))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, e.notFound(t)
		}
	}
	ps, err := pods(ctx, kube, t)
	if apierrors.IsNotFound(err) {
		return nil, e.notFound(t)
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range ps {
		if _, ok := podAddr(&ps[i]); ok && sel.Matches(labels.Set(ps[i].Labels)) {
			out = append(out, podIPs(&ps[i])...) // both families of a dual-stack pod
		}
	}
	if t.resource == "services" && e.field == "to" {
		s, err := kube.CoreV1().Services(e.namespace).Get(ctx, t.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, e.notFound(t)
		}
		if err != nil {
			return nil, err
		}
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil { // not "None"
				out = append(out, a.String())
			}
		}
	}
	return out, nil
}
