package vizcli

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// Object is one object a command acts on; Namespace is "" for a
// namespace.
type Object struct {
	Namespace, Name string
}

// Select lists the objects of kind in namespace ns ("": every namespace)
// whose labels match selector (kubectl's -l syntax), sorted.
func Select(ctx context.Context, kube kubernetes.Interface, kind Kind, ns, selector string) ([]Object, error) {
	if _, err := labels.Parse(selector); err != nil {
		return nil, fmt.Errorf("selector %q: %w", selector, err)
	}
	opts := metav1.ListOptions{LabelSelector: selector}
	var list runtime.Object
	var err error
	switch kind {
	case Namespaces:
		list, err = kube.CoreV1().Namespaces().List(ctx, opts)
	case Pods:
		list, err = kube.CoreV1().Pods(ns).List(ctx, opts)
	case Services:
		list, err = kube.CoreV1().Services(ns).List(ctx, opts)
	case Deployments:
		list, err = kube.AppsV1().Deployments(ns).List(ctx, opts)
	case StatefulSets:
		list, err = kube.AppsV1().StatefulSets(ns).List(ctx, opts)
	case DaemonSets:
		list, err = kube.AppsV1().DaemonSets(ns).List(ctx, opts)
	case ReplicaSets:
		list, err = kube.AppsV1().ReplicaSets(ns).List(ctx, opts)
	case Jobs:
		list, err = kube.BatchV1().Jobs(ns).List(ctx, opts)
	case CronJobs:
		list, err = kube.BatchV1().CronJobs(ns).List(ctx, opts)
	default:
		return nil, fmt.Errorf("cannot list %s", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", kind, err)
	}
	out := make([]Object, 0, len(items))
	for _, it := range items {
		m, err := meta.Accessor(it)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", kind, err)
		}
		out = append(out, Object{Namespace: m.GetNamespace(), Name: m.GetName()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
