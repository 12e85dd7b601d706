package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Poll calls cond every interval until it reports done, returns an error, or
// ctx ends. The last error cond returned is kept for the timeout message.
func Poll(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	for {
		done, err := cond(ctx)
		if err == nil && done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitFor fails the test unless cond reports done within timeout; what
// describes the awaited state in the failure message.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, 250*time.Millisecond, cond); err != nil {
		t.Fatalf("waiting %s for %s: %v", timeout, what, err)
	}
}

// WaitDeploymentReady waits until every replica of a Deployment's current
// generation is updated and ready.
func (c *Cluster) WaitDeploymentReady(t testing.TB, ns, name string, timeout time.Duration) *appsv1.Deployment {
	t.Helper()
	var dep *appsv1.Deployment
	WaitFor(t, timeout, "deployment "+ns+"/"+name+" ready", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		dep = d
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.ReadyReplicas == want && s.Replicas == want, nil
	})
	return dep
}

// WaitPodDone waits until a pod has finished and returns it; the test fails
// if it does not finish within timeout.
func (c *Cluster) WaitPodDone(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, timeout, "pod "+ns+"/"+name+" to finish", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	return pod
}

// RunPod runs a one-shot pod with one container until it finishes and
// returns its logs; the test fails if the pod does not succeed.
func (c *Cluster) RunPod(t testing.TB, ns, name, image string, args ...string) string {
	t.Helper()
	ctx := Context(t, time.Minute)
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	pod := c.WaitPodDone(t, ns, name, 2*time.Minute)
	logs, err := c.Logs(ctx, ns, name, name)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s/%s %s, want Succeeded; logs:\n%s", ns, name, pod.Status.Phase, logs)
	}
	return logs
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
