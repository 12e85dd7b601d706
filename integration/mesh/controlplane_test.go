package mesh

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const (
	controlNamespace = "plexus-system"
	controlManifests = "../../deploy/plexus-control"
	trustDomain      = "cluster.local"
)

// controlPlane is the control plane a test deployed.
type controlPlane struct {
	// AnchorsPEM are the trust anchors proxies are given.
	AnchorsPEM string
	// anchorCert and anchorKey sign new issuers (rotation).
	anchorCert, anchorKey string
	bin                   string
}

// deployControlPlane creates plexus-system, an issuer Secret made by
// `plexus-control issuer`, and everything in deploy/plexus-control, and
// waits until identity and destination are ready. The namespace is deleted
// when the test ends.
func deployControlPlane(t *testing.T, c *clustertest.Cluster) *controlPlane {
	t.Helper()
	bin := os.Getenv("PLEXUS_CONTROL_BIN")
	if bin == "" {
		t.Skip("PLEXUS_CONTROL_BIN is not set (run `make test`)")
	}
	ctx := clustertest.Context(t, 5*time.Minute)
	// An earlier test's control plane may still be going.
	if ns, err := c.Client.CoreV1().Namespaces().Get(ctx, controlNamespace, metav1.GetOptions{}); err == nil && ns.DeletionTimestamp != nil {
		waitNamespaceGone(t, c, controlNamespace)
	}
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.Dump(t, controlNamespace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Cluster-scoped objects (RBAC, the webhook configuration) first.
		exec.CommandContext(ctx, os.Getenv(clustertest.EnvKubectl), "--kubeconfig", c.Kubeconfig,
			"delete", "--ignore-not-found", "--wait=false", "-k", controlManifests).Run()
		c.Client.CoreV1().Namespaces().Delete(ctx, controlNamespace, metav1.DeleteOptions{})
		clustertest.Poll(ctx, time.Second, func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, controlNamespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	dir := t.TempDir()
	cp := &controlPlane{bin: bin, anchorCert: filepath.Join(dir, "ca.crt"), anchorKey: filepath.Join(dir, "ca.key")}
	issuer := cp.run(t, "issuer", "--trust-domain="+trustDomain, "--anchor-out="+dir)
	applyYAML(t, c, issuer)
	c.Kubectl(t, "apply", "-k", controlManifests)
	for _, name := range []string{"plexus-identity", "plexus-destination"} {
		c.WaitDeploymentReady(t, controlNamespace, name, 3*time.Minute)
	}
	cm, err := c.Client.CoreV1().ConfigMaps(controlNamespace).Get(ctx, "plexus-identity-trust-anchors", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the trust anchors: %v", err)
	}
	cp.AnchorsPEM = cm.Data["ca-bundle.crt"]
	if !strings.Contains(cp.AnchorsPEM, "BEGIN CERTIFICATE") {
		t.Fatalf("ConfigMap plexus-identity-trust-anchors has no certificate: %v", cm.Data)
	}
	return cp
}

// rotateIssuer signs a new issuer with the same anchor and applies it.
// It returns once every identity pod has logged loading it.
func (cp *controlPlane) rotateIssuer(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	loads := func(ctx context.Context) map[string]int {
		pods, err := c.Client.CoreV1().Pods(controlNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-identity"})
		if err != nil {
			t.Fatalf("listing identity pods: %v", err)
		}
		n := map[string]int{}
		for _, p := range pods.Items {
			logs, _ := c.Logs(ctx, controlNamespace, p.Name, "identity")
			n[p.Name] = strings.Count(logs, "issuer loaded")
		}
		return n
	}
	before := loads(clustertest.Context(t, 30*time.Second))
	applyYAML(t, c, cp.run(t, "issuer", "--trust-domain="+trustDomain,
		"--anchor-cert="+cp.anchorCert, "--anchor-key="+cp.anchorKey))
	clustertest.WaitFor(t, time.Minute, "identity logs loading the new issuer", func(ctx context.Context) (bool, error) {
		now := loads(ctx)
		for pod, n := range now {
			if n <= before[pod] {
				return false, nil
			}
		}
		return len(now) > 0, nil
	})
}

// scale sets a control-plane Deployment's replicas and waits for it.
func scale(t *testing.T, c *clustertest.Cluster, ns, name string, replicas int) {
	t.Helper()
	c.Kubectl(t, "-n", ns, "scale", "deployment/"+name, "--replicas="+itoa(replicas))
	clustertest.WaitFor(t, 2*time.Minute, ns+"/"+name+" at "+itoa(replicas)+" ready replicas", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && clustertest.PodReady(&p) {
				ready++
			}
		}
		return ready == replicas && len(pods.Items) == replicas, nil
	})
}

func (cp *controlPlane) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(cp.bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("plexus-control %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func applyYAML(t *testing.T, c *clustertest.Cluster, doc string) {
	t.Helper()
	c.Kubectl(t, "apply", "-f", yamlFile(t, doc))
}

// yamlFile writes doc to a file for kubectl -f, removed when the test
// ends.
func yamlFile(t *testing.T, doc string) string {
	t.Helper()
	// Not t.TempDir(): subtest names put commas in it, and kubectl -f
	// splits paths at commas.
	f, err := os.CreateTemp("", "plexus-apply-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(doc); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

// waitNamespaceGone waits (up to 3 minutes) until namespace ns is gone.
func waitNamespaceGone(t *testing.T, c *clustertest.Cluster, ns string) {
	t.Helper()
	clustertest.WaitFor(t, 3*time.Minute, "namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
