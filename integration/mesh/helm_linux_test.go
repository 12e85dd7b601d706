package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// chartsDir is deploy/charts from this package.
const chartsDir = "../../deploy/charts"

// helmCLI runs the helm binary against the test cluster.
type helmCLI func(args ...string) (string, error)

func newHelm(t *testing.T, c *clustertest.Cluster) helmCLI {
	t.Helper()
	bin := os.Getenv("PLEXUS_HELM")
	if bin == "" {
		t.Skip("PLEXUS_HELM is not set (run `make test`)")
	}
	home := t.TempDir()
	return func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// helmUninstallAll uninstalls the three core releases, ignoring those not
// installed.
func helmUninstallAll(helm helmCLI) {
	for _, r := range [][]string{{"plexus-node", controlNamespace}, {"plexus-control-plane", controlNamespace}, {"plexus-crds", "default"}} {
		helm("uninstall", r[0], "--namespace", r[1], "--wait", "--timeout=2m")
	}
}

// TestHelmInstall installs Plexus from its charts with real helm, the way
// a platform team does, with no identity values: identity generates the
// trust anchor and issuer. It checks that plexusctl check passes and the
// demo runs with every edge meshed over mutual TLS, that an upgrade that
// rolls identity keeps the generated issuer, and that helm uninstall with
// plexusctl uninstall leaves the node's conflist as it was.
func TestHelmInstall(t *testing.T) {
	env := clustercni.Read(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to read the node's CNI configuration")
	}
	c := clustertest.Connect(t)
	ctl := newPlexusctl(t, c)
	helm := newHelm(t, c)
	primary, original := env.KeepNodeCNI(t)

	must := func(args ...string) string {
		t.Helper()
		out, err := helm(args...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Cleanup(func() {
		helmUninstallAll(helm)
		removeMesh(t, c, ctl, env)
	})

	// Gateway API CRDs another install left are not Helm's to take.
	crds := []string{"--set", "gatewayAPI.installCRDs=true"}
	if _, err := kubectl(t, c, "get", "crd", "httproutes.gateway.networking.k8s.io"); err == nil {
		crds = []string{"--set", "gatewayAPI.installCRDs=false"}
	}
	must(append([]string{"install", "plexus-crds", filepath.Join(chartsDir, "plexus-crds"), "--namespace", "default"}, crds...)...)
	must("install", "plexus-control-plane", filepath.Join(chartsDir, "plexus-control-plane"), "--namespace", controlNamespace)
	must("install", "plexus-node", filepath.Join(chartsDir, "plexus-node"), "--namespace", controlNamespace,
		"--set", "cni.binDir="+env.BinDir, "--set", "cni.confDir="+env.ConfDir)

	clustertest.WaitFor(t, 3*time.Minute, "plexusctl check to pass", func(context.Context) (bool, error) {
		_, err := ctl("check")
		return err == nil, nil
	})
	issuer := func() []byte {
		s, err := c.Client.CoreV1().Secrets(controlNamespace).Get(clustertest.Context(t, time.Minute), "plexus-identity-issuer", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the generated issuer: %v", err)
		}
		return s.Data["tls.key"]
	}
	generated := issuer()

	t.Run("demo meshed over mTLS", func(t *testing.T) {
		deployDemo(t, c)
		for _, edge := range []struct{ server, client string }{{"web", "load"}, {"books", "web"}, {"votes", "web"}} {
			clustertest.WaitFor(t, time.Minute, edge.client+" -> "+edge.server+" over mTLS", func(context.Context) (bool, error) {
				p := pods(t, c, demoNamespace, edge.server)
				if len(p) == 0 {
					return false, nil
				}
				m := proxyMetrics(t, c, demoNamespace, p[0].Name)
				id := `client_id="spiffe://` + trustDomain + "/ns/" + demoNamespace + "/sa/" + edge.client + `"`
				for _, l := range strings.Split(m, "\n") {
					if strings.HasPrefix(l, "request_total{") && strings.Contains(l, `direction="inbound"`) && strings.Contains(l, `tls="true"`) && strings.Contains(l, id) {
						return true, nil
					}
				}
				return false, nil
			})
		}
	})

	t.Run("check --proxy passes the demo's data plane", func(t *testing.T) {
		var out string
		clustertest.WaitFor(t, time.Minute, "plexusctl check --proxy to pass", func(context.Context) (bool, error) {
			var err error
			out, err = ctl("check", "--proxy", "-n", demoNamespace)
			return err == nil, nil
		})
		for _, want := range []string{"✔ data plane: proxies run the control plane's version", "✔ data plane: proxies hold valid certificates",
			"✔ data plane: meshed pods have their redirect rules", "✔ data plane: pods that ask for the proxy run it"} {
			if !strings.Contains(out, want) {
				t.Errorf("plexusctl check --proxy lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("stat names objects as kubectl does", func(t *testing.T) {
		for _, args := range [][]string{
			{"stat", "deploy/web", "-n", demoNamespace},
			{"stat", "deploy", "web", "-n", demoNamespace},
			{"stat", "deployment/web", "-n", demoNamespace},
			{"stat", "deploy", "-A", "-l", "app=web"},
		} {
			out, err := ctl(append(args, "--window=1s", "-o", "json")...)
			var rows []struct{ Namespace, Name string }
			if err == nil {
				err = json.Unmarshal([]byte(out), &rows)
			}
			if err != nil || len(rows) != 1 || rows[0].Namespace != demoNamespace || rows[0].Name != "web" {
				t.Errorf("plexusctl %s: %v, want one row, %s/web:\n%s", strings.Join(args, " "), err, demoNamespace, out)
			}
		}
		out, err := ctl("stat", "svc/web", "-n", demoNamespace)
		if err == nil || !strings.Contains(out, `unknown kind "svc"`) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("stat svc/web: %v, want one line naming the resource:\n%s", err, out)
		}
	})

	t.Run("an upgrade that rolls identity keeps the generated issuer", func(t *testing.T) {
		identityPods := func() []string {
			list, err := c.Client.CoreV1().Pods(controlNamespace).List(clustertest.Context(t, time.Minute),
				metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-identity"})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					names = append(names, p.Name)
				}
			}
			return names
		}
		before := identityPods()
		must("upgrade", "plexus-control-plane", filepath.Join(chartsDir, "plexus-control-plane"), "--namespace", controlNamespace,
			"--reuse-values", "--set", "identity.resources.requests.cpu=11m")
		c.Kubectl(t, "-n", controlNamespace, "rollout", "status", "deployment/plexus-identity", "--timeout=2m")
		var after []string
		clustertest.WaitFor(t, time.Minute, "the old identity pod to go", func(context.Context) (bool, error) {
			after = identityPods()
			return len(after) == 1, nil
		})
		if len(before) != 1 || after[0] == before[0] {
			t.Fatalf("identity did not roll: %d pods before, %d after", len(before), len(after))
		}
		if !bytes.Equal(issuer(), generated) {
			t.Error("the upgrade replaced the generated issuer")
		}
		if _, err := ctl("check"); err != nil {
			t.Errorf("plexusctl check after the upgrade: %v", err)
		}
	})

	t.Run("helm uninstall and plexusctl uninstall leave the node as before", func(t *testing.T) {
		must("uninstall", "plexus-node", "--namespace", controlNamespace, "--wait", "--timeout=2m")
		must("uninstall", "plexus-control-plane", "--namespace", controlNamespace, "--wait", "--timeout=2m")
		// The node agent is gone: plexusctl uninstall runs its cleanup on
		// every node with the dirs given, and prints what is left to delete
		// (the issuer identity generated).
		deletions, err := ctl("uninstall", "--timeout=3m", "--cni-bin-dir="+env.BinDir, "--cni-conf-dir="+env.ConfDir)
		if err != nil {
			t.Fatalf("plexusctl uninstall: %v\n%s", err, deletions)
		}
		c.Kubectl(t, "delete", "--ignore-not-found", "--wait=false", "-f", yamlFile(t, deletions))
		must("uninstall", "plexus-crds", "--namespace", "default", "--wait", "--timeout=3m")
		if got, _ := os.ReadFile(primary); !bytes.Equal(got, original) {
			t.Errorf("conflist after uninstall differs from before install:\n--- before\n%s\n--- after\n%s", original, got)
		}
		if _, err := os.Lstat(filepath.Join(env.BinDir, "plexus-cni")); !os.IsNotExist(err) {
			t.Errorf("plexus-cni still installed (err=%v)", err)
		}
		if out, err := kubectl(t, c, "get", "crd", "httproutes.gateway.networking.k8s.io"); err != nil {
			t.Errorf("helm uninstall deleted the shared Gateway API CRDs: %v\n%s", err, out)
		}
		if out, err := kubectl(t, c, "get", "crd", "serviceprofiles.plexus.dev"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("Plexus's own CRDs are still there: %v\n%s", err, out)
		}
	})
}
