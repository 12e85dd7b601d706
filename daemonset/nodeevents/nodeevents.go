// Package nodeevents records Kubernetes Events about the agent's node (bad
// CNI config, fights with another component), so `kubectl describe node`
// shows why the node's mesh plugin is not ready.
package nodeevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Component is the events' source.
const Component = "plexus-node"

// Recorder creates Events on one Node. The same reason and message are
// recorded at most once per Interval. It needs create on events.
type Recorder struct {
	Client   kubernetes.Interface
	Node     string
	Interval time.Duration // default 5m

	mu   sync.Mutex
	last map[string]time.Time
}

// Validate checks the fields are set and fills defaults.
func (r *Recorder) Validate() error {
	if r.Client == nil {
		return errors.New("nodeevents: no client")
	}
	if r.Node == "" {
		return errors.New("nodeevents: node name is empty")
	}
	if r.Interval <= 0 {
		r.Interval = 5 * time.Minute
	}
	return nil
}

// Record creates an Event of type eventType (corev1.EventTypeNormal or
// corev1.EventTypeWarning) and reports whether it did (false: a duplicate
// within the interval).
func (r *Recorder) Record(ctx context.Context, eventType, reason, message string) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	now := time.Now()
	key := eventType + "\x00" + reason + "\x00" + message
	r.mu.Lock()
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if t, ok := r.last[key]; ok && now.Sub(t) < r.Interval {
		r.mu.Unlock()
		return false, nil
	}
	r.last[key] = now
	for k, t := range r.last {
		if now.Sub(t) >= r.Interval {
			delete(r.last, k)
		}
	}
	r.mu.Unlock()

	ts := metav1.NewTime(now)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// The kubelet's convention for node events: <node>.<hex nanos>.
			Name:      fmt.Sprintf("%s.%x", r.Node, now.UnixNano()),
			Namespace: metav1.NamespaceDefault,
		},
		// Nodes' events use the node name as UID, as the kubelet does.
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.Node, UID: types.UID(r.Node)},
		Reason:         reason,
		Message:        message,
		Type:           eventType,
		Source:         corev1.EventSource{Component: Component, Host: r.Node},
		FirstTimestamp: ts,
		LastTimestamp:  ts,
		Count:          1,
	}
	if _, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.mu.Lock()
		delete(r.last, key) // let a retry through
		r.mu.Unlock()
		return false, fmt.Errorf("recording event %s on node %s: %w", reason, r.Node, err)
	}
	return true, nil
}
