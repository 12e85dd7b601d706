package mesh

import (
	"context"
	"errors"
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

// plexusctl runs $PLEXUSCTL_BIN against the cluster and returns its
// standard output, with its standard error added when it fails.
type plexusctl func(args ...string) (string, error)

func newPlexusctl(t *testing.T, c *clustertest.Cluster) plexusctl {
	t.Helper()
	bin := os.Getenv("PLEXUSCTL_BIN")
	if bin == "" {
		t.Skip("PLEXUSCTL_BIN is not set (run `make test`)")
	}
	return newPlexusctlAt(c, bin)
}

// newPlexusctlAt is newPlexusctl with another binary (the previous
// build's, say).
func newPlexusctlAt(c *clustertest.Cluster, bin string) plexusctl {
	return func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return string(out) + stderr.String(), err
		}
		return string(out), nil
	}
}

// installAllKeepingCNI is installAll with a new plexusctl, every node's
// CNI files restored as they were when the test ends (KeepNodeCNI); it
// returns the plexusctl and installAll's check output.
func installAllKeepingCNI(t *testing.T, c *clustertest.Cluster, env clustercni.Env, flags ...string) (plexusctl, string) {
	t.Helper()
	ctl := newPlexusctl(t, c)
	env.KeepNodeCNI(t)
	return ctl, installAll(t, c, env, ctl, flags...)
}

// installAll installs all of Plexus the way a user does, `plexusctl
// install [flags] | kubectl apply --server-side -f -`, with the cluster's
// CNI dirs, deletes it all when the test ends, and returns the output of
// the first `plexusctl check` that passes.
func installAll(t *testing.T, c *clustertest.Cluster, env clustercni.Env, ctl plexusctl, flags ...string) string {
	t.Helper()
	manifests, err := ctl(append([]string{"install", "--cni-bin-dir=" + env.BinDir, "--cni-conf-dir=" + env.ConfDir}, flags...)...)
	if err != nil {
		t.Fatalf("plexusctl install: %v\n%s", err, manifests)
	}
	file := filepath.Join(os.TempDir(), "plexus-install-"+time.Now().Format("150405.000000")+".yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.Dump(t, controlNamespace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, os.Getenv(clustertest.EnvKubectl), "--kubeconfig", c.Kubeconfig,
			"delete", "--ignore-not-found", "--wait=true", "-f", file).CombinedOutput(); err != nil {
			// Not fatal: an object whose CRD went first is "not
			// recognized"; the namespace below is what must be gone.
			t.Logf("deleting what plexusctl install rendered: %v: %.500s", err, out)
		}
		os.Remove(file)
		waitNamespaceGone(t, c, controlNamespace)
	})
	c.Kubectl(t, "apply", "--server-side", "-f", file)

	var last string
	clustertest.WaitFor(t, 3*time.Minute, "plexusctl check to pass", func(context.Context) (bool, error) {
		last, err = ctl("check")
		return err == nil, nil
	})
	return last
}

// TestPlexusctlInstallAndCheck installs all of Plexus the way a user does,
// waits for `plexusctl check` to pass, then removes the node agent and
// expects check to fail naming it.
func TestPlexusctlInstallAndCheck(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	ctl, last := installAllKeepingCNI(t, c, env)
	for _, want := range []string{"✔", "plexus-identity", "plexus-destination", "plexus-injector"} {
		if !strings.Contains(last, want) {
			t.Errorf("plexusctl check output lacks %q:\n%s", want, last)
		}
	}
	t.Logf("plexusctl check:\n%s", last)

	ctx := clustertest.Context(t, time.Minute)
	if err := c.Client.AppsV1().DaemonSets(controlNamespace).Delete(ctx, "plexus-node", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the node agent: %v", err)
	}
	clustertest.WaitFor(t, time.Minute, "plexusctl check to fail without the node agent", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(controlNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-node"})
		if err != nil || len(pods.Items) != 0 {
			return false, err
		}
		last, err = ctl("check")
		var exit *exec.ExitError
		return errors.As(err, &exit) && exit.ExitCode() == 1, nil
	})
	if !strings.Contains(last, "✘") || !strings.Contains(last, "plexus-node") {
		t.Errorf("plexusctl check without the node agent does not name it:\n%s", last)
	}
}
