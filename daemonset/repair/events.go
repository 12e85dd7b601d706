package repair

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Component is the source of the Events recorded on pods.
const Component = "plexus-node"

// recordPodEvent creates one Event on pod, found by `kubectl describe pod`
// (it selects by the pod's name, namespace and UID). It needs only create
// on events: each repair is one Event, so nothing is counted or patched.
func recordPodEvent(ctx context.Context, client kubernetes.Interface, node string, pod *corev1.Pod, eventType, reason, message string) error {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
			Namespace: pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1",
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
		Reason:         reason,
		Message:        message,
		Type:           eventType,
		Source:         corev1.EventSource{Component: Component, Host: node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on pod %s/%s: %w", reason, pod.Namespace, pod.Name, err)
	}
	return nil
}
