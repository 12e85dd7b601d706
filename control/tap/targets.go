package tap

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/api/tapapi"
	"github.com/plexus-mesh/plexus/control/meshpod"
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
	get := metav1.GetOptions{}
	switch t.resource {
	case "deployments":
		o, err := kube.AppsV1().Deployments(t.namespace).Get(ctx, t.name, get)
		if err != nil {
			return nil, err
		}
		return o.Spec.Selector, nil
	case "statefulsets":
		o, err := kube.AppsV1().StatefulSets(t.namespace).Get(ctx, t.name, get)
		if err != nil {
			return nil, err
		}
		return o.Spec.Selector, nil
	case "daemonsets":
		o, err := kube.AppsV1().DaemonSets(t.namespace).Get(ctx, t.name, get)
		if err != nil {
			return nil, err
		}
		return o.Spec.Selector, nil
	case "replicasets":
		o, err := kube.AppsV1().ReplicaSets(t.namespace).Get(ctx, t.name, get)
		if err != nil {
			return nil, err
		}
		return o.Spec.Selector, nil
	case "jobs":
		o, err := kube.BatchV1().Jobs(t.namespace).Get(ctx, t.name, get)
		if err != nil {
			return nil, err
		}
		return o.Spec.Selector, nil
	}
	return nil, fmt.Errorf("cannot tap %s", t.resource)
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

// podAddr is a running pod's IP.
func podAddr(p *corev1.Pod) (netip.Addr, bool) {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(p.Status.PodIP)
	return a, err == nil
}

// peerAddrs resolves a tap's "to" and "from" filters to the addresses its
// requests go to and come from (nil: any).
func peerAddrs(ctx context.Context, kube kubernetes.Interface, r tapapi.Request) (dsts, srcs []string, err error) {
	dsts, err = endAddrs(ctx, kube, "to", r.ToNamespace, r.ToResource, r.ToName)
	if err != nil {
		return nil, nil, err
	}
	srcs, err = endAddrs(ctx, kube, "from", r.FromNamespace, r.FromResource, r.FromName)
	return dsts, srcs, err
}

// endAddrs resolves one end of a tap's filter (field names it in errors)
// to addresses: the pods' IPs, and for a destination Service its cluster
// IPs, which outbound requests are addressed to.
func endAddrs(ctx context.Context, kube kubernetes.Interface, field, ns, resource, name string) ([]string, error) {
	if ns == "" && resource == "" {
		return nil, nil
	}
	if ns == "" {
		return nil, fmt.Errorf("%sResource %q needs %sNamespace", field, resource, field)
	}
	t := target{namespace: ns, resource: resource, name: name}
	if t.resource == "" || t.resource == "namespaces" {
		t = target{namespace: ns, resource: "namespaces", name: ns}
	} else if !slices.Contains(tapapi.Resources, t.resource) || t.name == "" {
		return nil, fmt.Errorf("%sResource %q %sName %q: want one of %s and a name", field, resource, field, name, strings.Join(tapapi.Resources, ", "))
	}
	ps, err := pods(ctx, kube, t)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range ps {
		if a, ok := podAddr(&ps[i]); ok {
			out = append(out, a.String())
		}
	}
	if t.resource == "services" && field == "to" {
		s, err := kube.CoreV1().Services(ns).Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil { // not "None"
				out = append(out, a.String())
			}
		}
	}
	if len(out) > MaxPeerAddrs {
		return nil, fmt.Errorf("%s %s %s/%s has %d addresses; a tap filters on at most %d: name a smaller one", field, t.resource, ns, t.name, len(out), MaxPeerAddrs)
	}
	if len(out) == 0 {
		out = []string{"0.0.0.0"} // nothing to match: no event, rather than every one
	}
	return out, nil
}
