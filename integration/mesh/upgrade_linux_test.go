package mesh

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// upgradeRate is the load the upgrade tests keep up, in requests per
// second to the demo's web (each a request to books and a gRPC call to
// votes behind it).
const upgradeRate = "200"

// previousBuild builds (cached by commit) and loads the previous Plexus
// (integration/cluster/previous.sh) and returns its directory: bin/ holds
// its plexusctl, its images are tagged :prev.
func previousBuild(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../cluster/previous.sh").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			t.Skipf("this clone has no history to build the previous Plexus from (a shallow clone): %s", ee.Stderr)
		}
		var stderr []byte
		if ee != nil {
			stderr = ee.Stderr
		}
		t.Fatalf("building the previous Plexus: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestPlexusctlUpgradeRefusesWithoutPlexus: upgrade against a cluster
// without Plexus says so and changes nothing.
func TestPlexusctlUpgradeRefusesWithoutPlexus(t *testing.T) {
	clustercni.Read(t).Lock(t) // plexus-system is the CNI tests' too
	c := clustertest.Connect(t)
	ctl := newPlexusctl(t, c)
	out, err := ctl("upgrade")
	if err == nil || !strings.Contains(out, "Plexus is not installed in this cluster") {
		t.Fatalf("plexusctl upgrade without Plexus: %v\n%s", err, out)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(clustertest.Context(t, time.Minute), controlNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after a refused upgrade: %v", controlNamespace, err)
	}
}

// TestPlexusctlUpgradeUnderLoad installs the previous build with the demo
// and a constant load through the mesh, upgrades to this build with
// plexusctl upgrade, and checks that no request failed during the whole
// upgrade (the node agent's rollout included), that the proxies running
// kept their certificates, that a pod created mid-upgrade is meshed, and
// that the upgraded mesh passes plexusctl check.
func TestPlexusctlUpgradeUnderLoad(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	ctl := newPlexusctl(t, c)
	prev := previousBuild(t)
	env.KeepNodeCNI(t)
	prevctl := newPlexusctlAt(c, filepath.Join(prev, "bin", "plexusctl"))

	manifests, err := prevctl("install", "--version=prev", "--cni-bin-dir="+env.BinDir, "--cni-conf-dir="+env.ConfDir)
	if err != nil {
		t.Fatalf("the previous plexusctl install: %v\n%s", err, manifests)
	}
	t.Cleanup(func() { removeMesh(t, c, ctl, env) })
	c.Kubectl(t, "apply", "--server-side", "-f", yamlFile(t, manifests))
	waitCheck(t, prevctl)

	// What an earlier version shipped and this one does not (a
	// ClusterRole labelled as Plexus's, rendered by install) is pruned;
	// what install did not render (Plexus's optional objects a user
	// applies, like deploy/plexus-node-repair-delete; the user's own), or
	// is not of a kind install renders, is kept.
	applyYAML(t, c, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plexus-retired, labels: {app.kubernetes.io/part-of: plexus, app.kubernetes.io/managed-by: plexusctl}}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plexus-optional, labels: {app.kubernetes.io/part-of: plexus}}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plexus-users-own}
rules: []
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plexus-retired, namespace: plexus-system, labels: {app.kubernetes.io/part-of: plexus}}
`)
	t.Cleanup(func() {
		kubectl(t, c, "delete", "clusterrole", "plexus-users-own", "plexus-optional", "plexus-retired", "--ignore-not-found")
	})
	upgradeUnderLoad(t, c, ctl, func() {
		out, err := ctl("upgrade", "--version=dev", "--timeout=4m")
		if err != nil {
			t.Errorf("plexusctl upgrade: %v\n%s", err, out)
		}
		t.Logf("plexusctl upgrade:\n%s", out)
	})
	t.Run("prunes only what it shipped", func(t *testing.T) {
		if out, err := kubectl(t, c, "get", "clusterrole", "plexus-retired"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("the retired ClusterRole is still there: %v\n%s", err, out)
		}
		for _, o := range [][]string{{"clusterrole", "plexus-users-own"}, {"clusterrole", "plexus-optional"}, {"-n", controlNamespace, "configmap", "plexus-retired"}} {
			if out, err := kubectl(t, c, append([]string{"get"}, o...)...); err != nil {
				t.Errorf("upgrade deleted %v: %v\n%s", o, err, out)
			}
		}
	})
}

// TestHelmUpgradeUnderLoad is TestPlexusctlUpgradeUnderLoad with the
// charts: installed at the previous build's images, upgraded with helm
// upgrade to this build's.
func TestHelmUpgradeUnderLoad(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	ctl := newPlexusctl(t, c)
	helm := newHelm(t, c)
	previousBuild(t)
	env.KeepNodeCNI(t)
	t.Cleanup(func() {
		helmUninstallAll(helm)
		removeMesh(t, c, ctl, env)
	})
	// The previous identity has no --generate-issuer: the chart is given
	// the trust anchor and issuer.
	id, err := install.GenerateIdentity(trustDomain, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"image": map[string]any{"tag": "prev"},
		"identity": map[string]any{
			"trustAnchorsPEM": string(id.AnchorsPEM),
			"issuer":          map[string]any{"tls": map[string]any{"crtPEM": string(id.IssuerCertPEM), "keyPEM": string(id.IssuerKeyPEM)}},
		},
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(args ...string) {
		t.Helper()
		if out, err := helm(args...); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	crds := "gatewayAPI.installCRDs=true"
	if _, err := kubectl(t, c, "get", "crd", "httproutes.gateway.networking.k8s.io"); err == nil {
		crds = "gatewayAPI.installCRDs=false"
	}
	must("install", "plexus-crds", filepath.Join(chartsDir, "plexus-crds"), "--namespace", "default", "--set", crds)
	must("install", "plexus-control-plane", filepath.Join(chartsDir, "plexus-control-plane"), "--namespace", controlNamespace, "--values", valuesFile)
	must("install", "plexus-node", filepath.Join(chartsDir, "plexus-node"), "--namespace", controlNamespace,
		"--set", "image.tag=prev", "--set", "cni.binDir="+env.BinDir, "--set", "cni.confDir="+env.ConfDir)
	waitCheck(t, ctl)

	upgradeUnderLoad(t, c, ctl, func() {
		must("upgrade", "plexus-control-plane", filepath.Join(chartsDir, "plexus-control-plane"), "--namespace", controlNamespace,
			"--reuse-values", "--set", "image.tag=dev", "--wait", "--timeout=4m")
		must("upgrade", "plexus-node", filepath.Join(chartsDir, "plexus-node"), "--namespace", controlNamespace,
			"--reuse-values", "--set", "image.tag=dev", "--wait", "--timeout=4m")
	})
}

// upgradeUnderLoad runs the demo with a load through the mesh, runs
// upgrade, and checks what an upgrade must keep.
func upgradeUnderLoad(t *testing.T, c *clustertest.Cluster, ctl plexusctl, upgrade func()) {
	t.Helper()
	deployDemo(t, c)
	deploy(t, c, demoNamespace, "upgrade-load", 1, meshed, restricted(podSpec("upgrade-load", "serve", ":8080")))
	c.WaitDeploymentReady(t, demoNamespace, "upgrade-load", 3*time.Minute)
	anchors := trustAnchors(t, c)
	web := pods(t, c, demoNamespace, "web")[0]
	certBefore := servingChain(t, web.Status.PodIP, anchors)[0]
	podsBefore := podUIDs(t, c, demoNamespace)

	client := loadClient{&routesTest{c: c, ns: demoNamespace, client: pods(t, c, demoNamespace, "upgrade-load")[0].Name}, "upgrade"}
	load := client.start(t, "-rate", upgradeRate, "-c", "8", "-duration", "3m50s", "-timeout", "10s",
		"http://web."+demoNamespace+".svc.cluster.local:8080/")
	time.Sleep(5 * time.Second) // Sleep: 5s of load before the upgrade, part of what is measured

	done := make(chan struct{})
	go func() {
		defer close(done)
		upgrade()
	}()
	// A pod created while the control plane and node agents roll.
	clustertest.WaitFor(t, 2*time.Minute, "the upgrade to start rolling", func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(controlNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if strings.HasSuffix(p.Spec.Containers[0].Image, ":dev") {
				return true, nil
			}
		}
		return false, nil
	})
	deploy(t, c, demoNamespace, "mid-upgrade", 1, meshed, restricted(podSpec("mid-upgrade", "serve", ":8080")))
	<-done
	time.Sleep(5 * time.Second) // Sleep: 5s of load after the upgrade, part of what is measured
	load.stop(t)
	res := load.result(t)
	if t.Failed() {
		return
	}

	t.Run("no request failed", func(t *testing.T) {
		if len(res.Errors) > 0 || len(res.Statuses) != 1 || res.Statuses["200"] != res.Requests || res.Requests < 1000 {
			t.Errorf("%d requests in %.0f s: statuses %v, errors %v; want all 200", res.Requests, res.Seconds, res.Statuses, res.Errors)
		}
		t.Logf("%d requests in %.0f s through the upgrade: statuses %v, latency p50 %.1f ms, p99 %.1f ms, max %.1f ms",
			res.Requests, res.Seconds, res.Statuses, res.Latency.P50, res.Latency.P99, res.Latency.Max)
	})
	t.Run("the control plane and node agents run this build", func(t *testing.T) {
		list, err := c.Client.CoreV1().Pods(controlNamespace).List(clustertest.Context(t, time.Minute), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if img := p.Spec.Containers[0].Image; p.DeletionTimestamp == nil && !strings.HasSuffix(img, ":dev") {
				t.Errorf("pod %s runs %s", p.Name, img)
			}
		}
		waitCheck(t, ctl)
	})
	t.Run("running proxies keep their pods and certificates", func(t *testing.T) {
		for name, uid := range podsBefore {
			if now := podUIDs(t, c, demoNamespace)[name]; now != uid {
				t.Errorf("pod %s was replaced", name)
			}
		}
		if after := servingChain(t, web.Status.PodIP, anchors)[0]; !bytes.Equal(after.Raw, certBefore.Raw) {
			t.Errorf("web's proxy presents another certificate after the upgrade (serial %v, was %v)", after.SerialNumber, certBefore.SerialNumber)
		}
		if trustAnchors(t, c) != anchors {
			t.Error("the trust anchors changed")
		}
	})
	t.Run("a pod created mid-upgrade is meshed", func(t *testing.T) {
		c.WaitDeploymentReady(t, demoNamespace, "mid-upgrade", 3*time.Minute)
		p := pods(t, c, demoNamespace, "mid-upgrade")[0]
		if !meshpod.IsMeshed(&p) {
			t.Fatalf("pod %s has no proxy", p.Name)
		}
		servingChain(t, p.Status.PodIP, anchors) // its proxy serves mTLS with a certificate from the anchors
	})
}

// waitCheck waits for plexusctl check to pass.
func waitCheck(t *testing.T, ctl plexusctl) {
	t.Helper()
	clustertest.WaitFor(t, 3*time.Minute, "plexusctl check to pass", func(context.Context) (bool, error) {
		_, err := ctl("check")
		return err == nil, nil
	})
}

func trustAnchors(t *testing.T, c *clustertest.Cluster) string {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(controlNamespace).Get(clustertest.Context(t, time.Minute), "plexus-identity-trust-anchors", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["ca-bundle.crt"]
}

func podUIDs(t *testing.T, c *clustertest.Cluster, ns string) map[string]string {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(clustertest.Context(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, p := range list.Items {
		m[p.Name] = string(p.UID)
	}
	return m
}

// removeMesh removes whatever is left of Plexus after a test: the node's
// plugin through plexusctl uninstall, then everything it printed, then the
// namespace.
func removeMesh(t *testing.T, c *clustertest.Cluster, ctl plexusctl, env clustercni.Env) {
	t.Helper()
	if t.Failed() {
		c.Dump(t, controlNamespace)
	}
	deletions, err := ctl("uninstall", "--timeout=2m", "--cni-bin-dir="+env.BinDir, "--cni-conf-dir="+env.ConfDir)
	if err == nil {
		file := filepath.Join(os.TempDir(), "plexus-delete-"+time.Now().Format("150405.000000")+".yaml")
		if os.WriteFile(file, []byte(deletions), 0o600) == nil {
			kubectl(t, c, "delete", "--ignore-not-found", "--wait=false", "-f", file)
			os.Remove(file)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.Client.CoreV1().Namespaces().Delete(ctx, controlNamespace, metav1.DeleteOptions{})
	clustertest.Poll(ctx, time.Second, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, controlNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
