package meshpod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIsMeshed(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	never := corev1.ContainerRestartPolicy("Never")
	pod := func(containers, inits []corev1.Container) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: containers, InitContainers: inits}}
	}
	app := corev1.Container{Name: "app"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"nil pod", nil, false},
		{"app only", pod([]corev1.Container{app}, nil), false},
		{"proxy container", pod([]corev1.Container{app, {Name: ProxyContainerName}}, nil), true},
		{"native sidecar", pod([]corev1.Container{app}, []corev1.Container{{Name: ProxyContainerName, RestartPolicy: &always}}), true},
		{"init container without restartPolicy", pod([]corev1.Container{app}, []corev1.Container{{Name: ProxyContainerName}}), false},
		{"init container restartPolicy Never", pod([]corev1.Container{app}, []corev1.Container{{Name: ProxyContainerName, RestartPolicy: &never}}), false},
		{"other native sidecar", pod([]corev1.Container{app}, []corev1.Container{{Name: "plexus-proxyx", RestartPolicy: &always}}), false},
	} {
		if got := IsMeshed(tc.pod); got != tc.want {
			t.Errorf("%s: IsMeshed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
