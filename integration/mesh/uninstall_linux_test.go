package mesh

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestPlexusctlUninstall installs Plexus as a user does, then removes it
// as a user does, `plexusctl uninstall | kubectl delete -f -`, and checks
// the nodes: the cleanup DaemonSet ran `plexus-node uninstall` there
// before anything else was deleted -- every node's conflist is byte for
// byte as its primary CNI wrote it (the bridge's, or flannel's in make
// test's flannel cycle), and node 1's binary, credentials and report
// socket are gone -- and the deletion leaves nothing of Plexus in the
// cluster.
func TestPlexusctlUninstall(t *testing.T) {
	env := clustercni.Read(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to read the node's state dir")
	}
	c := clustertest.Connect(t)
	ctl := newPlexusctl(t, c)
	primary, _ := env.KeepNodeCNI(t)
	originals := map[string][]byte{} // every node's, the primary CNI's own
	for _, p := range env.PrimaryConflists(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		originals[p] = b
	}
	installAll(t, c, env, ctl)
	if b, _ := os.ReadFile(primary); !bytes.Contains(b, []byte(`"plexus-cni"`)) {
		t.Fatalf("installed, but %s has no plexus-cni entry:\n%s", primary, b)
	}
	state := "/var/lib/plexus" // the DaemonSet's state dir on the host, as install renders it
	if _, err := os.Lstat(filepath.Join(state, "reports.sock")); err != nil {
		t.Errorf("the agent's report socket: %v", err)
	}

	start := time.Now()
	deletions, err := ctl("uninstall", "--timeout=3m")
	if err != nil {
		t.Fatalf("plexusctl uninstall: %v\n%s", err, deletions)
	}
	t.Logf("plexusctl uninstall took %v", time.Since(start))

	t.Run("the node is clean before anything else is deleted", func(t *testing.T) {
		for p, original := range originals {
			if got, _ := os.ReadFile(p); !bytes.Equal(got, original) {
				t.Errorf("%s after uninstall differs from before install:\n--- before\n%s\n--- after\n%s", p, original, got)
			}
		}
		for _, f := range []string{filepath.Join(env.BinDir, "plexus-cni"), filepath.Join(state, "plexus-cni.kubeconfig"),
			filepath.Join(state, "plexus-cni.token"), filepath.Join(state, "reports.sock")} {
			if _, err := os.Lstat(f); !os.IsNotExist(err) {
				t.Errorf("%s still there after the cleanup (err=%v)", f, err)
			}
		}
		ctx := clustertest.Context(t, time.Minute)
		if _, err := c.Client.AppsV1().DaemonSets(controlNamespace).Get(ctx, "plexus-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the node agent's DaemonSet is still there: %v", err)
		}
		for _, name := range []string{"plexus-injector", "plexus-identity", "plexus-destination"} {
			if _, err := c.Client.AppsV1().Deployments(controlNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("plexusctl uninstall (print mode) deleted Deployment %s: %v", name, err)
			}
		}
	})

	t.Run("the printed deletions remove everything with the webhook first", func(t *testing.T) {
		docs := strings.Split(deletions, "\n---\n")
		if !strings.Contains(docs[0], "WebhookConfiguration") || !strings.Contains(docs[len(docs)-1], "kind: Namespace") {
			t.Fatalf("want the webhook first and the namespace last:\n%s", deletions)
		}
		file := filepath.Join(t.TempDir(), "delete.yaml")
		if err := os.WriteFile(file, []byte(deletions), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Kubectl(t, "delete", "--wait=false", "-f", file)
		clustertest.WaitFor(t, 3*time.Minute, "namespace "+controlNamespace+" to be gone", func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, controlNamespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		ctx := clustertest.Context(t, time.Minute)
		if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "plexus-injector", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("webhook configuration still there: %v", err)
		}
		for _, name := range []string{"plexus-node", "plexus-identity", "plexus-destination", "plexus-injector"} {
			if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("ClusterRole %s still there: %v", name, err)
			}
		}
	})
}
