package localcluster

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const testappImage = "plexus.dev/testapp:dev"

func TestNodeReady(t *testing.T) {
	c := clustertest.Connect(t)
	ctx := clustertest.Context(t, 30*time.Second)
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("want 1 node, got %d", len(nodes.Items))
	}
	node := nodes.Items[0]
	ready := false
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		t.Fatalf("node %s is not Ready: %v", node.Name, node.Status.Conditions)
	}
	if got := node.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(got, "v1.36.") {
		t.Errorf("kubelet version %q, want v1.36.x", got)
	}
}

// TestServiceByName deploys two replicas of the test server behind a
// Service and has a client pod reach it by name through cluster DNS.
func TestServiceByName(t *testing.T) {
	c := clustertest.Connect(t)
	ns := c.Namespace(t, "localcluster", nil)
	ctx := clustertest.Context(t, 3*time.Minute)
	labels := map[string]string{"app": "echo"}

	_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:            "server",
					Image:           testappImage,
					ImagePullPolicy: corev1.PullNever,
					Args:            []string{"serve", ":8080"},
					Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service: %v", err)
	}
	c.WaitDeploymentReady(t, ns, "echo", 2*time.Minute)

	host := fmt.Sprintf("echo.%s.svc.cluster.local", ns)
	logs := c.RunPod(t, ns, "client", testappImage, "get", "http://"+host+"/by-name")
	if want := fmt.Sprintf("resolved %s to %s\n", host, svc.Spec.ClusterIP); !strings.Contains(logs, want) {
		t.Errorf("client did not resolve the Service name to its ClusterIP; want %q in logs:\n%s", want, logs)
	}
	if !regexp.MustCompile(`hello from echo-[a-z0-9]+-[a-z0-9]+ port=8080 path=/by-name`).MatchString(logs) {
		t.Errorf("client got no answer from an echo replica; logs:\n%s", logs)
	}

	// kubectl logs goes through the apiserver to the kubelet.
	if out := c.Kubectl(t, "-n", ns, "logs", "client"); out != logs {
		t.Errorf("kubectl logs = %q, want %q", out, logs)
	}
	servers := c.Kubectl(t, "-n", ns, "logs", "deployment/echo")
	if !strings.Contains(servers, "serving on :8080") {
		t.Errorf("kubectl logs deployment/echo = %q, want the server's start line", servers)
	}
}

func TestDNSStaysInCluster(t *testing.T) {
	c := clustertest.Connect(t)
	ns := c.Namespace(t, "localcluster-dns", nil)
	// A name outside the cluster domain must fail fast with NXDOMAIN from
	// the cluster's own DNS, never be forwarded off the machine.
	logs := c.RunPod(t, ns, "lookup", testappImage, "lookup", "kubernetes.default.svc.cluster.local", "example.com")
	for _, want := range []string{
		"kubernetes.default.svc.cluster.local: 10.96.0.1\n",
		"example.com: not found\n",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("want %q in lookup output:\n%s", want, logs)
		}
	}
}
