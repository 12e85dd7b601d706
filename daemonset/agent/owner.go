package agent

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Owner is the DaemonSet that runs the agent. When the agent stops
// because its DaemonSet is gone or being deleted, Plexus is being removed
// from the node, not upgraded: the agent then removes the plugin. Left
// behind, the plugin would keep a copy of this pod's token, which dies
// with the pod, and fail every new pod sandbox on the node.
type Owner struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
}

// Removed reports whether the DaemonSet is gone or being deleted.
func (o *Owner) Removed(ctx context.Context) (bool, error) {
	ds, err := o.Client.AppsV1().DaemonSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading DaemonSet %s/%s: %w", o.Namespace, o.Name, err)
	}
	return ds.DeletionTimestamp != nil, nil
}
