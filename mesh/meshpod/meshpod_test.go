package meshpod

import (
	"strings"
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

func TestIPs(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"nil", nil, ""},
		{"dual stack", &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}}}, "10.0.0.1 fd00::1"},
		{"podIP only", &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.2"}}, "10.0.0.2"},
		{"mapped", &corev1.Pod{Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "::ffff:10.0.0.3"}, {IP: "bogus"}}}}, "10.0.0.3"},
		{"host network", &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}, Status: corev1.PodStatus{PodIP: "192.168.1.5"}}, ""},
		{"no IP yet", &corev1.Pod{}, ""},
	} {
		var got []string
		for _, a := range IPs(tc.pod) {
			got = append(got, a.String())
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("%s: IPs = %q, want %q", tc.name, s, tc.want)
		}
	}
}
