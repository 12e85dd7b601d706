package cniplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestNodeImageInstall is the node-image path on the real node:
// `plexus-node install --root` lays plexus-cni into a fresh image root
// that already holds the node's primary CNI config and reference plugins,
// naming the kubelet's own kubeconfig, with no API call and no
// credentials written. The test then points the cluster's containerd at
// the image root's CNI dirs (bind mounts over the dirs its config names,
// then a config reload) and starts a meshed pod: it must get exactly the
// default rules, which the plugin can only decide on by reading the pod
// with the kubelet's credentials -- allowed by the Node authorizer for
// pods bound to this node, and refused for a pod bound elsewhere.
func TestNodeImageInstall(t *testing.T) {
	env := clustercni.Read(t)
	agentBin := os.Getenv("PLEXUS_NODE_BIN")
	if agentBin == "" {
		t.Skip("PLEXUS_NODE_BIN is not set (run `make test`)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount the image's CNI dirs and read pods' network namespaces")
	}
	c := clustertest.Connect(t)
	primary, original := env.KeepNodeCNI(t)
	kubeletKubeconfig := filepath.Join(env.StateDir, "kubelet.kubeconfig")

	root := t.TempDir()
	imageConf, imageBin := filepath.Join(root, env.ConfDir), filepath.Join(root, env.BinDir)
	bakePrimaryCNI(t, env, primary, original, imageConf, imageBin)
	logFile := filepath.Join(t.TempDir(), "plexus-cni.log")
	pluginConfig := filepath.Join(t.TempDir(), "plugin.json")
	if err := os.WriteFile(pluginConfig, []byte(`{"log_file": "`+logFile+`", "log_level": "debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(agentBin, "install", "--root="+root, "--plugin-binary="+env.Plugin,
		"--cni-bin-dir="+env.BinDir, "--cni-conf-dir="+env.ConfDir,
		"--kubeconfig="+kubeletKubeconfig, "--plugin-config="+pluginConfig).CombinedOutput()
	if err != nil {
		t.Fatalf("plexus-node install --root: %v\n%s", err, out)
	}
	imagePrimary := filepath.Join(imageConf, filepath.Base(primary))

	t.Run("laid down into the image only, with the kubelet's kubeconfig", func(t *testing.T) {
		if got, _ := os.ReadFile(primary); !bytes.Equal(got, original) {
			t.Errorf("install --root changed the node's own %s", primary)
		}
		waitPatched(t, imagePrimary, time.Second)
		raw, err := os.ReadFile(imagePrimary)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatalf("parsing %s: %v", imagePrimary, err)
		}
		if got := list.Plugins[len(list.Plugins)-1]["kubeconfig"]; got != kubeletKubeconfig {
			t.Errorf("plexus-cni entry names kubeconfig %v, want the kubelet's %s", got, kubeletKubeconfig)
		}
		if _, err := os.Stat(filepath.Join(imageBin, "plexus-cni")); err != nil {
			t.Errorf("plugin binary not in the image: %v", err)
		}
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && (d.Name() == plugininstall.KubeconfigFile || d.Name() == plugininstall.TokenFile) {
				t.Errorf("node-image install wrote credentials: %s", path)
			}
			return nil
		})
	})

	t.Run("the kubelet's credentials read only pods bound to this node", func(t *testing.T) {
		checkNodeAuthorizer(t, c, kubeletKubeconfig)
	})

	pointRuntimeAt(t, env.ConfDir, map[string]string{env.BinDir: imageBin, env.ConfDir: imageConf})
	ns := c.Namespace(t, "nodeimage", nil) // after the mounts: its pods' DEL runs through the image's config

	t.Run("a meshed pod gets rules through the image's config", func(t *testing.T) {
		checkMeshedPod(t, c, ns, "image-meshed")
		raw, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatalf("the image's plugin wrote no log: %v", err)
		}
		if !loggedMeshedAdd(raw, "image-meshed") {
			t.Errorf("plugin log has no meshed ADD of image-meshed:\n%s", raw)
		}
	})
}

// bakePrimaryCNI builds what a platform team's image holds before Plexus
// is added: the node's primary conflist and its CNI binaries.
func bakePrimaryCNI(t *testing.T, env clustercni.Env, primary string, conflist []byte, confDir, binDir string) {
	t.Helper()
	for _, d := range []string{confDir, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(confDir, filepath.Base(primary)), conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	bins, err := os.ReadDir(env.BinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if b.Name() == "plexus-cni" || !b.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(env.BinDir, b.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(binDir, b.Name()), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// pointRuntimeAt bind-mounts each image dir over the node dir the
// runtime's config names (node dir -> image dir) and makes containerd
// reload its CNI config from its conf dir conf, as booting the image
// would; everything is undone when the test ends. containerd watches the
// conf dir it opened at start, whose inode the mount hides, so the reload
// is triggered through a descriptor opened on it before mounting.
func pointRuntimeAt(t *testing.T, conf string, mounts map[string]string) {
	t.Helper()
	confFd, err := unix.Open(conf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening %s: %v", conf, err)
	}
	t.Cleanup(func() { unix.Close(confFd) })
	for node, image := range mounts {
		if err := unix.Mount(image, node, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mounting %s over %s: %v", image, node, err)
		}
		t.Cleanup(func() { unmount(t, node) })
	}
	t.Cleanup(func() {
		// Unmounted (cleanups run last in, first out): the runtime goes back to the node's config.
		reloadCNIConfig(t, unix.AT_FDCWD, conf)
	})
	reloadCNIConfig(t, confFd, "")
}

// unmount removes the bind mount at dir. The runtime may be running a
// plugin from it that moment (another test's pod coming or going: CI saw
// EBUSY), so a busy mount is retried for a few seconds, then detached:
// it leaves the mount tree at once and goes when the last plugin exits.
func unmount(t *testing.T, dir string) {
	t.Helper()
	err := unix.Unmount(dir, 0)
	for deadline := time.Now().Add(5 * time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); err = unix.Unmount(dir, 0) {
		time.Sleep(100 * time.Millisecond) // Sleep: nothing tells when a plugin started from the mount exits
	}
	if errors.Is(err, unix.EBUSY) {
		t.Logf("%s still busy after 5s; detaching it", dir)
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil {
		t.Errorf("unmounting %s: %v", dir, err)
	}
}

// reloadCNIConfig creates and removes a file in the watched conf dir
// (dirfd, or path when dirfd is AT_FDCWD) and gives containerd time to
// reload.
func reloadCNIConfig(t *testing.T, dirfd int, path string) {
	t.Helper()
	name := filepath.Join(path, ".plexus-test-reload")
	fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Errorf("poking the CNI conf dir: %v", err)
		return
	}
	unix.Close(fd)
	if err := unix.Unlinkat(dirfd, name, 0); err != nil {
		t.Errorf("poking the CNI conf dir: %v", err)
	}
	// Sleep: containerd reloads its CNI config asynchronously and tells no
	// one when it is done; only its CRI status (crictl info) shows the
	// loaded config, and this module has no CRI client.
	time.Sleep(2 * time.Second)
}

// checkNodeAuthorizer reads, with the kubelet's kubeconfig, one pod bound
// to this node (allowed) and one bound to another node (refused).
func checkNodeAuthorizer(t *testing.T, c *clustertest.Cluster, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", kubeconfig, err)
	}
	kubelet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t, "nodeauthz", nil)
	ctx := clustertest.Context(t, time.Minute)
	node := clustercni.Read(t).NodeName // node 1, whose kubelet's kubeconfig this is
	for name, boundTo := range map[string]string{"here": node, "elsewhere": "plexus-elsewhere"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{NodeName: boundTo, Containers: []corev1.Container{container("app", "serve", ":8080")}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
	}
	// No kubelet will ever confirm the deletion of the pod bound elsewhere.
	t.Cleanup(func() {
		c.Client.CoreV1().Pods(ns).Delete(context.Background(), "elsewhere", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	clustertest.WaitFor(t, 30*time.Second, "the kubelet to be allowed to read the pod bound to it", func(ctx context.Context) (bool, error) {
		_, err := kubelet.CoreV1().Pods(ns).Get(ctx, "here", metav1.GetOptions{})
		return err == nil, nil
	})
	_, err = kubelet.CoreV1().Pods(ns).Get(ctx, "elsewhere", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet read a pod bound to another node: err=%v, want Forbidden", err)
	}
}

// loggedMeshedAdd says whether the plugin's log has a successful ADD that
// meshed the named pod.
func loggedMeshedAdd(log []byte, pod string) bool {
	done := regexp.MustCompile(`msg="ADD done" .*mesh=true .*K8S_POD_NAME=` + regexp.QuoteMeta(pod) + `[;"]`)
	return done.Match(log)
}
