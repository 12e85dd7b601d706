// Package nodetaint removes the plexus.dev/cni-not-ready:NoSchedule taint
// from the agent's node once the plugin is in place, so meshed pods are
// never scheduled to a node that would start them without redirection.
package nodetaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Key is the taint nodes register with until the plugin is installed.
const Key = podcontract.NodeTaintKey

// Remover removes the taint from one node. It needs get and patch on
// nodes.
type Remover struct {
	Client kubernetes.Interface
	Node   string
}

// Validate checks the fields are set.
func (r *Remover) Validate() error {
	if r.Client == nil {
		return errors.New("nodetaint: no client")
	}
	if r.Node == "" {
		return errors.New("nodetaint: node name is empty (set NODE_NAME from spec.nodeName)")
	}
	return nil
}

// Remove drops every NoSchedule taint with Key from the node and reports
// whether there was one. The patch carries the node's resourceVersion, so
// a concurrent change to the taints is never overwritten: it is retried.
func (r *Remover) Remove(ctx context.Context) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	removed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := r.Client.CoreV1().Nodes().Get(ctx, r.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := make([]corev1.Taint, 0, len(node.Spec.Taints))
		for _, t := range node.Spec.Taints {
			if t.Key == Key && t.Effect == corev1.TaintEffectNoSchedule {
				continue
			}
			kept = append(kept, t)
		}
		if len(kept) == len(node.Spec.Taints) {
			removed = false
			return nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": kept},
		})
		if err != nil {
			return err
		}
		if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		removed = true
		return nil
	})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return false, fmt.Errorf("removing taint %s from node %s (the agent needs get and patch on nodes, and may remove only this taint from only its own node): %w", Key, r.Node, err)
		}
		return false, fmt.Errorf("removing taint %s from node %s: %w", Key, r.Node, err)
	}
	return removed, nil
}
