package chaintest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

const (
	envRefPlugins = "PLEXUS_CNI_REF_PLUGINS"
	envKubeconfig = "PLEXUS_TEST_KUBECONFIG"
	// The pod network lives only inside the test's node namespace.
	podSubnet   = "10.244.77.0/24"
	podSubnetV6 = "fd00:10:244:77::/64"
	bridgeName  = "plxtest0"
	// unschedulable keeps test pods Pending: no node has this label, so no
	// kubelet runs them. (Binding them to a missing node instead would let
	// kube-controller-manager's pod GC delete them mid-test.)
	unschedulable = "plexus.dev/cni-test-no-such-node"
)

// pluginDir holds the plexus-cni binary built once by TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv(envDialHelper); ok {
		os.Exit(dialHelper(v)) // a child of dialFrom
	}
	code := func() int {
		if os.Geteuid() == 0 && os.Getenv(envRefPlugins) != "" && os.Getenv(envKubeconfig) != "" {
			dir, err := os.MkdirTemp("", "plexus-cni-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
			cmd := exec.Command(gobin, "build", "-o", filepath.Join(dir, "plexus-cni"), "github.com/plexus-mesh/plexus/cni-plugin/cmd/plexus-cni")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building plexus-cni:", err)
				return 1
			}
			pluginDir = dir
		}
		return m.Run()
	}()
	os.Exit(code)
}

// requireEnv skips unless the test can run: root, reference plugins, and an
// API server.
func requireEnv(t testing.TB) (refDir, kubeconfig string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	refDir = os.Getenv(envRefPlugins)
	if refDir == "" {
		t.Skipf("set %s to a directory holding the bridge, host-local and loopback CNI plugins", envRefPlugins)
	}
	kubeconfig = os.Getenv(envKubeconfig)
	if kubeconfig == "" {
		t.Skipf("set %s to the kubeconfig of a kube-apiserver the test may create namespaces and pods in", envKubeconfig)
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(refDir, p)); err != nil {
			t.Fatalf("%s: %v", envRefPlugins, err)
		}
	}
	if pluginDir == "" {
		t.Fatal("plexus-cni was not built by TestMain")
	}
	return refDir, kubeconfig
}

// env is one test's world: a node netns with the bridge, an API forwarder,
// a test namespace in the API server, and the CNI configuration.
type env struct {
	t         testing.TB
	node      ns.NetNS
	kube      kubernetes.Interface
	namespace string
	cni       *libcni.CNIConfig
	lo        *libcni.PluginConfig
	chain     *libcni.NetworkConfigList
	primary   *libcni.NetworkConfigList
	plexus    []byte // the plexus-cni entry, for direct invocation
	logFile   string
	dualStack bool
	uids      map[string]string // pod name -> UID, passed as K8S_POD_UID
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("creating netns: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

func ipv6Available() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

func newEnv(t testing.TB, extraPlexus map[string]any) *env {
	t.Helper()
	refDir, kubeconfig := requireEnv(t)
	e := &env{t: t, dualStack: ipv6Available() && os.Getenv("PLEXUS_CNI_BENCH_IPV4_ONLY") == "", uids: map[string]string{}}
	tmp := t.TempDir()

	e.node = newNS(t)
	if err := e.node.Do(func(ns.NetNS) error { return exec.Command("ip", "link", "set", "lo", "up").Run() }); err != nil {
		t.Fatalf("lo up in node netns: %v", err)
	}

	// Kubernetes: client, test namespace, and a kubeconfig for the plugin
	// that reaches the API server through a forwarder inside the node netns.
	loaded, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", envKubeconfig, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*loaded, nil).ClientConfig()
	if err != nil {
		t.Fatalf("%s: %v", envKubeconfig, err)
	}
	if e.kube, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	e.namespace = "plexus-cni-test-" + randHex(4)
	ctx := context.Background()
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating test namespace: %v", err)
	}
	t.Cleanup(func() {
		// No kubelet runs these pods, so delete them without a grace period.
		ctx := context.Background()
		zero := int64(0)
		_ = e.kube.CoreV1().Pods(e.namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = e.kube.CoreV1().Namespaces().Delete(ctx, e.namespace, metav1.DeleteOptions{})
	})
	fwdAddr := e.forwardAPI(rc.Host)
	kc := filepath.Join(tmp, "plexus-cni.kubeconfig")
	e.writeForwardedKubeconfig(loaded, fwdAddr, kc)

	// CNI configuration.
	e.logFile = filepath.Join(tmp, "plexus-cni.log")
	ranges := []any{[]any{map[string]any{"subnet": podSubnet}}}
	if e.dualStack {
		ranges = append(ranges, []any{map[string]any{"subnet": podSubnetV6}})
	}
	bridge := map[string]any{
		"type": "bridge", "bridge": bridgeName, "isGateway": true, "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "ranges": ranges, "dataDir": filepath.Join(tmp, "ipam")},
	}
	plexus := map[string]any{"type": "plexus-cni", "kubeconfig": kc, "log_file": e.logFile, "log_level": "debug"}
	for k, v := range extraPlexus {
		plexus[k] = v
	}
	e.chain = confList(t, "1.1.0", "plexus-test", bridge, plexus)
	// Same network name as the chain, so host-local and the libcni cache
	// agree when a pod added with the primary alone is deleted with the chain.
	e.primary = confList(t, "1.1.0", "plexus-test", bridge)
	e.plexus, _ = json.Marshal(plexus)
	lo, err := libcni.NetworkPluginConfFromBytes([]byte(`{"cniVersion":"1.1.0","name":"lo","type":"loopback"}`))
	if err != nil {
		t.Fatal(err)
	}
	e.lo = lo
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{refDir, pluginDir}, filepath.Join(tmp, "cache"), nil)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(e.logFile); err == nil {
				t.Logf("plexus-cni log:\n%s", b)
			}
		}
	})
	return e
}

func confList(t testing.TB, version, name string, plugins ...map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	b, err := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	l, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// forwardAPI listens on 127.0.0.1 inside the node netns and relays every
// connection to the API server from the test's own (host) netns.
func (e *env) forwardAPI(apiHost string) string {
	e.t.Helper()
	u := strings.TrimPrefix(strings.TrimPrefix(apiHost, "https://"), "http://")
	if !strings.Contains(u, ":") {
		u += ":443"
	}
	var ln net.Listener
	err := e.node.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		e.t.Fatalf("forwarder listen in node netns: %v", err)
	}
	var wg sync.WaitGroup
	e.t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", u, 5*time.Second) // host netns
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

func (e *env) writeForwardedKubeconfig(cfg *clientcmdapi.Config, addr, path string) {
	e.t.Helper()
	c := cfg.DeepCopy()
	ctxName := c.CurrentContext
	cl := c.Clusters[c.Contexts[ctxName].Cluster]
	host := strings.TrimPrefix(strings.TrimPrefix(cl.Server, "https://"), "http://")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if cl.TLSServerName == "" && !cl.InsecureSkipTLSVerify {
		cl.TLSServerName = host
	}
	scheme := "https://"
	if strings.HasPrefix(cl.Server, "http://") {
		scheme = "http://"
	}
	cl.Server = scheme + addr
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		e.t.Fatal(err)
	}
}

// createPod creates a pod object that no scheduler places and so no kubelet
// runs. A meshed pod's proxy has the environment the injector gives it
// that the plugin reads: the inbound source, which gates the self-call
// rules.
func (e *env) createPod(name string, meshed bool, annotations map[string]string) {
	e.t.Helper()
	var proxyEnv []corev1.EnvVar
	if meshed {
		proxyEnv = []corev1.EnvVar{{Name: podcontract.EnvInboundSource, Value: podcontract.DefaultInboundSource}}
	}
	e.createPodWithProxyEnv(name, meshed, annotations, proxyEnv)
}

// createPodWithProxyEnv is createPod with the proxy's environment given
// (nil: a proxy injected before the inbound source existed).
func (e *env) createPodWithProxyEnv(name string, meshed bool, annotations map[string]string, proxyEnv []corev1.EnvVar) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{unschedulable: "true"},
			Containers:   []corev1.Container{{Name: "app", Image: "registry.invalid/app"}},
		},
	}
	if meshed {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: "plexus-proxy", Image: "registry.invalid/proxy", RestartPolicy: &always, Env: proxyEnv}}
	}
	created, err := e.kube.CoreV1().Pods(e.namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	e.uids[name] = string(created.UID)
}

func (e *env) rt(podNS ns.NetNS, name string) *libcni.RuntimeConf {
	id := "plexus-test-" + name
	args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", e.namespace}, {"K8S_POD_NAME", name}, {"K8S_POD_INFRA_CONTAINER_ID", id}}
	if uid := e.uids[name]; uid != "" {
		args = append(args, [2]string{"K8S_POD_UID", uid})
	}
	return &libcni.RuntimeConf{ContainerID: id, NetNS: podNS.Path(), IfName: "eth0", Args: args}
}

// inNode runs fn on a thread in the node netns, so plugins fork there.
func (e *env) inNode(fn func() error) error {
	return e.node.Do(func(ns.NetNS) error { return fn() })
}
