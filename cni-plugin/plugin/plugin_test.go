package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// fakeGetter reads pods from the fake clientset and hands them, and its
// API errors, through the JSON decoding HTTPPodGetter uses.
type fakeGetter struct{ c *fake.Clientset }

func (g fakeGetter) GetPod(ctx context.Context, namespace, name string) (*podrules.Pod, error) {
	p, err := g.c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		st.Kind, st.APIVersion = "Status", "v1"
		body, merr := json.Marshal(st)
		if merr != nil {
			return nil, merr
		}
		return nil, podrules.ResponseError(int(st.Code), "application/json", body)
	}
	if err != nil {
		return nil, err
	}
	p.Kind, p.APIVersion = "Pod", "v1"
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return podrules.DecodePod("application/json", body)
}

// fakeTables records what the plugin asks of the network namespace.
type fakeTables struct {
	applied  [][]rules.RuleSet
	removed  int
	state    map[rules.Family]rules.State
	applyErr error
	rmErr    error
}

func (f *fakeTables) Apply(_ context.Context, _ string, sets []rules.RuleSet) error {
	if f.applyErr != nil {
		return f.applyErr
	}
	f.applied = append(f.applied, sets)
	return nil
}

func (f *fakeTables) Remove(context.Context, string) error { f.removed++; return f.rmErr }

func (f *fakeTables) Current(_ context.Context, _ string, fams []rules.Family) (map[rules.Family]rules.State, error) {
	return f.state, nil
}

type harness struct {
	p      *Plugin
	client *fake.Clientset
	tables *fakeTables
	out    *bytes.Buffer
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{client: fake.NewClientset(objs...), tables: &fakeTables{}, out: &bytes.Buffer{}}
	h.p = &Plugin{
		Stdout: h.out,
		Retry:  podrules.Retry{Attempts: 3, PerAttempt: time.Second, Backoff: time.Millisecond},
		Pods:   func(*netconf.NetConf) (podrules.PodGetter, error) { return fakeGetter{h.client}, nil },
		Tables: func(*netconf.NetConf, *slog.Logger) Tables { return h.tables },
	}
	return h
}

func pod(ns, name string, annotations map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func withSidecar(p *corev1.Pod) {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: podrules.ProxyContainerName})
}

func withNativeSidecar(p *corev1.Pod) {
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: podrules.ProxyContainerName, RestartPolicy: &always})
}

const prevResult100 = `{"cniVersion":"%s","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"address":"10.244.0.5/24","gateway":"10.244.0.1","interface":0}%s],"dns":{}}`

const prevResult040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"version":"4","address":"10.244.0.5/24","gateway":"10.244.0.1","interface":0}],"dns":{}}`

func stdin(t *testing.T, cniVersion string, extra map[string]any, prev string) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": cniVersion, "name": "k8s-pod-network", "type": "plexus-cni", "kubeconfig": "/etc/kubeconfig"}
	for k, v := range extra {
		conf[k] = v
	}
	if prev != "" {
		conf["prevResult"] = json.RawMessage(prev)
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cmdArgs(data []byte, ns, name string) *skel.CmdArgs {
	return &skel.CmdArgs{
		ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0", StdinData: data,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=c1", ns, name),
	}
}

func getCount(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

func TestAddDecisions(t *testing.T) {
	cases := []struct {
		name      string
		ns, pod   string
		objs      []runtime.Object
		extra     map[string]any
		wantMesh  bool
		wantGets  int
		wantCode  uint
		wantInErr string
	}{
		{name: "meshed plain container", ns: "app", pod: "web",
			objs: []runtime.Object{pod("app", "web", nil, withSidecar)}, wantMesh: true, wantGets: 1},
		{name: "meshed native sidecar", ns: "app", pod: "web",
			objs: []runtime.Object{pod("app", "web", nil, withNativeSidecar)}, wantMesh: true, wantGets: 1},
		{name: "init container that is not restartable is not a sidecar", ns: "app", pod: "web",
			objs: []runtime.Object{pod("app", "web", nil, func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: podrules.ProxyContainerName}}
			})}, wantGets: 1},
		{name: "not meshed", ns: "app", pod: "web",
			objs: []runtime.Object{pod("app", "web", nil, nil)}, wantGets: 1},
		{name: "kube-system skipped without API call", ns: "kube-system", pod: "coredns-1",
			objs: []runtime.Object{pod("kube-system", "coredns-1", nil, withSidecar)}},
		{name: "custom exclude list replaces the default", ns: "kube-system", pod: "x",
			objs:  []runtime.Object{pod("kube-system", "x", nil, withSidecar)},
			extra: map[string]any{"exclude_namespaces": []string{"other"}}, wantMesh: true, wantGets: 1},
		{name: "custom exclude list", ns: "other", pod: "x",
			objs:  []runtime.Object{pod("other", "x", nil, withSidecar)},
			extra: map[string]any{"exclude_namespaces": []string{"other"}}},
		{name: "node agent skipped without API call", ns: "plexus-system", pod: "plexus-node-x7k2p",
			objs: []runtime.Object{pod("plexus-system", "plexus-node-x7k2p", nil, withSidecar)}},
		{name: "control plane in plexus-system is meshed", ns: "plexus-system", pod: "plexus-destination-1",
			objs: []runtime.Object{pod("plexus-system", "plexus-destination-1", nil, withSidecar)}, wantMesh: true, wantGets: 1},
		{name: "pod not found", ns: "app", pod: "gone", wantGets: 1, wantCode: ErrCodeAPI, wantInErr: `pods "gone" not found`},
		{name: "malformed annotation", ns: "app", pod: "web",
			objs:     []runtime.Object{pod("app", "web", map[string]string{podcontract.AnnotationSkipOutboundPorts: "25,smtp"}, withSidecar)},
			wantGets: 1, wantCode: ErrCodeBadAnnotation, wantInErr: `config.plexus.dev/skip-outbound-ports="25,smtp"`},
		{name: "malformed annotation on an unmeshed pod is ignored", ns: "app", pod: "web",
			objs:     []runtime.Object{pod("app", "web", map[string]string{podcontract.AnnotationSkipOutboundPorts: "x"}, nil)},
			wantGets: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.objs...)
			prev := fmt.Sprintf(prevResult100, "1.0.0", "")
			err := h.p.Add(cmdArgs(stdin(t, "1.0.0", tc.extra, prev), tc.ns, tc.pod))
			if got := getCount(h.client); got != tc.wantGets {
				t.Errorf("pod GETs = %d, want %d", got, tc.wantGets)
			}
			if tc.wantCode != 0 {
				var e *types.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode || !strings.Contains(e.Msg, tc.wantInErr) {
					t.Fatalf("error = %#v, want code %d containing %q", err, tc.wantCode, tc.wantInErr)
				}
				if len(h.tables.applied) != 0 || h.out.Len() != 0 {
					t.Fatalf("failed ADD applied rules or printed a result")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if meshed := len(h.tables.applied) == 1; meshed != tc.wantMesh {
				t.Fatalf("applied %d rule sets, want mesh=%v", len(h.tables.applied), tc.wantMesh)
			}
			if h.out.String() != prev {
				t.Fatalf("result is not prevResult unchanged:\n got %s\nwant %s", h.out, prev)
			}
		})
	}
}

func TestAddRuleContentsAndFamilies(t *testing.T) {
	p := pod("app", "web", map[string]string{
		podcontract.AnnotationSkipOutboundSubnets: "10.96.0.0/12,fd00:96::/108",
		podcontract.AnnotationInboundPort:         "5143",
	}, withSidecar)
	h := newHarness(t, p)
	extra := map[string]any{"skip_outbound_ports": []any{25, "8000-8100"}, "proxy": map[string]any{"uid": 3000}}
	prev := fmt.Sprintf(prevResult100, "1.1.0", `,{"address":"fd00:244::5/64","interface":0}`)
	if err := h.p.Add(cmdArgs(stdin(t, "1.1.0", extra, prev), "app", "web")); err != nil {
		t.Fatal(err)
	}
	sets := h.tables.applied[0]
	if len(sets) != 2 || sets[0].Family != rules.IPv4 || sets[1].Family != rules.IPv6 {
		t.Fatalf("want IPv4 and IPv6 rule sets for a dual-stack pod, got %d", len(sets))
	}
	v4 := renderAll(sets[0])
	for _, want := range []string{"--uid-owner 3000", "--dport 25 ", "--dport 8000:8100", "-d 10.96.0.0/12", "--to-ports 5143"} {
		if !strings.Contains(v4, want) {
			t.Errorf("IPv4 rules lack %q:\n%s", want, v4)
		}
	}
	v6 := renderAll(sets[1])
	if strings.Contains(v6, "10.96.0.0") || !strings.Contains(v6, "-d fd00:96::/108") {
		t.Errorf("IPv6 rules have the wrong subnets:\n%s", v6)
	}
}

func renderAll(rs rules.RuleSet) string { return rules.RenderApply(rs, rules.State{}) }

func TestAddAnswersInCalledVersion(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			h := newHarness(t, pod("app", "web", nil, withSidecar))
			prev := strings.Replace(prevResult040, `"0.4.0"`, strconv.Quote(v), 1) // 0.3.x results have 0.4.0's shape
			if !strings.HasPrefix(v, "0.") {
				prev = fmt.Sprintf(prevResult100, v, "")
			}
			if err := h.p.Add(cmdArgs(stdin(t, v, nil, prev), "app", "web")); err != nil {
				t.Fatal(err)
			}
			var got struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(h.out.Bytes(), &got); err != nil || got.CNIVersion != v || h.out.String() != prev {
				t.Fatalf("answer %s (err %v) is not prevResult in version %s", h.out, err, v)
			}
		})
	}
}

func TestAddRequiresPrevResultAndValidConfig(t *testing.T) {
	h := newHarness(t, pod("app", "web", nil, withSidecar))
	err := h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, ""), "app", "web"))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "prevResult") {
		t.Fatalf("ADD without prevResult: %v", err)
	}
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	for name, extra := range map[string]map[string]any{
		"no kubeconfig":   {"kubeconfig": ""},
		"bad mode":        {"iptables_mode": "ebpf"},
		"bad level":       {"log_level": "loud"},
		"bad skip list":   {"skip_outbound_ports": "http"},
		"bad subnet list": {"skip_inbound_subnets": []string{"10.0.0.0/99"}},
		"port conflict":   {"proxy": map[string]any{"inbound_port": 4140}},
	} {
		err := h.p.Add(cmdArgs(stdin(t, "1.0.0", extra, prev), "app", "web"))
		if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: got %v, want an invalid-config error", name, err)
		}
	}
	if getCount(h.client) != 0 {
		t.Errorf("invalid configs still read the pod")
	}
}

func TestPodLookupRetries(t *testing.T) {
	h := newHarness(t, pod("app", "web", nil, withSidecar))
	fails := 2
	h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	if err := h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web")); err != nil {
		t.Fatalf("two Transient failures then success: %v", err)
	}
	if getCount(h.client) != 3 || len(h.tables.applied) != 1 {
		t.Fatalf("GETs = %d, applied = %d", getCount(h.client), len(h.tables.applied))
	}

	// Always unavailable: bounded, and reported as try-again-later.
	h = newHarness(t)
	h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
	})
	err := h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web"))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "attempt 3 of 3") {
		t.Fatalf("persistent 503: %v", err)
	}
	if getCount(h.client) != 3 {
		t.Fatalf("GETs = %d, want 3", getCount(h.client))
	}

	// Forbidden is not retried.
	h = newHarness(t)
	h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web", errors.New("rbac"))
	})
	err = h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web"))
	if !errors.As(err, &e) || e.Code != ErrCodeAPI || !strings.Contains(e.Msg, "forbidden") || getCount(h.client) != 1 {
		t.Fatalf("forbidden: %v after %d GETs", err, getCount(h.client))
	}
}

func TestAddApplyFailure(t *testing.T) {
	h := newHarness(t, pod("app", "web", nil, withSidecar))
	h.tables.applyErr = errors.New("iptables-restore: line 3 failed")
	err := h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, fmt.Sprintf(prevResult100, "1.0.0", "")), "app", "web"))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != ErrCodeRules || !strings.Contains(e.Msg, "line 3 failed") {
		t.Fatalf("got %v", err)
	}
	h.tables.applyErr = fmt.Errorf("x: %w", netnsrules.ErrNetnsGone)
	err = h.p.Add(cmdArgs(stdin(t, "1.0.0", nil, fmt.Sprintf(prevResult100, "1.0.0", "")), "app", "web"))
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetNS {
		t.Fatalf("got %v", err)
	}
}

func TestDel(t *testing.T) {
	h := newHarness(t)
	args := cmdArgs(stdin(t, "1.0.0", nil, ""), "app", "web")
	if err := h.p.Del(args); err != nil || h.tables.removed != 1 {
		t.Fatalf("DEL: %v, removed %d", err, h.tables.removed)
	}
	h.tables.rmErr = fmt.Errorf("x: %w", netnsrules.ErrNetnsGone)
	if err := h.p.Del(args); err != nil {
		t.Fatalf("DEL with the netns gone must succeed: %v", err)
	}
	args.Netns = ""
	if err := h.p.Del(args); err != nil {
		t.Fatalf("DEL without netns: %v", err)
	}
	// DEL does not validate the kubeconfig and never reads the pod.
	args = cmdArgs(stdin(t, "1.0.0", map[string]any{"kubeconfig": ""}, ""), "app", "web")
	h.tables.rmErr = nil
	if err := h.p.Del(args); err != nil {
		t.Fatalf("DEL with an incomplete config: %v", err)
	}
	if getCount(h.client) != 0 {
		t.Fatal("DEL read the pod")
	}
}

func TestCheck(t *testing.T) {
	p := pod("app", "web", map[string]string{podcontract.AnnotationSkipInboundPorts: "22"}, withSidecar)
	cfg, err := podcontract.FromAnnotations(podcontract.Defaults(), p.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := rules.Build(cfg, rules.IPv4)
	good := rules.State{Chains: map[string][]string{}}
	for _, h := range rs.Hooks {
		good.Hooks = append(good.Hooks, h.Line())
	}
	for _, r := range rs.Rules {
		good.Chains[r.Chain] = append(good.Chains[r.Chain], r.Line())
	}
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")

	h := newHarness(t, p)
	h.tables.state = map[rules.Family]rules.State{rules.IPv4: good}
	if err := h.p.Check(cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web")); err != nil {
		t.Fatalf("CHECK on correct rules: %v", err)
	}

	bad := rules.State{Chains: map[string][]string{rules.ChainOutput: good.Chains[rules.ChainOutput], rules.ChainInbound: good.Chains[rules.ChainInbound][1:]}, Hooks: good.Hooks}
	h.tables.state = map[rules.Family]rules.State{rules.IPv4: bad}
	err = h.p.Check(cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web"))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != ErrCodeCheck || !strings.Contains(e.Msg, "missing") || !strings.Contains(e.Msg, "plexus/admin-port") {
		t.Fatalf("CHECK on a table missing the admin rule: %v", err)
	}

	// An excluded pod must have no rules.
	h.tables.state = map[rules.Family]rules.State{rules.IPv4: good}
	err = h.p.Check(cmdArgs(stdin(t, "1.0.0", nil, prev), "kube-system", "dns"))
	if !errors.As(err, &e) || e.Code != ErrCodeCheck || !strings.Contains(e.Msg, "exclude_namespaces") {
		t.Fatalf("CHECK of an excluded pod with rules: %v", err)
	}
	h.tables.state = map[rules.Family]rules.State{rules.IPv4: {}}
	if err := h.p.Check(cmdArgs(stdin(t, "1.0.0", nil, prev), "kube-system", "dns")); err != nil {
		t.Fatalf("CHECK of an excluded pod without rules: %v", err)
	}
}

func TestStatusAndKubeconfig(t *testing.T) {
	real := New(&bytes.Buffer{})
	real.NewLog = nil
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	args := &skel.CmdArgs{StdinData: stdin(t, "1.1.0", map[string]any{"kubeconfig": missing}, "")}
	err := real.Status(args)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrPluginNotAvailable || !strings.Contains(e.Msg, missing) {
		t.Fatalf("STATUS with a missing kubeconfig: %v", err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args.StdinData = stdin(t, "1.1.0", map[string]any{"kubeconfig": kc}, "")
	if err := real.Status(args); err != nil {
		if strings.Contains(err.Error(), "iptables") {
			t.Skipf("no iptables on this machine: %v", err)
		}
		t.Fatalf("STATUS with a valid kubeconfig: %v", err)
	}
}

func TestRetryValidate(t *testing.T) {
	if err := podrules.DefaultRetry().Validate(); err != nil {
		t.Fatal(err)
	}
	if (podrules.Retry{}).Validate() == nil {
		t.Fatal("zero retry policy accepted")
	}
}

// preparingTables is fakeTables that also records Prepare and Release.
type preparingTables struct {
	*fakeTables
	client        *fake.Clientset
	prepared      []string // "netns families GETs-so-far" per Prepare
	released      int
	releasedFirst bool // Release came before Apply
}

func (p *preparingTables) Prepare(netns string, fams []rules.Family) {
	p.prepared = append(p.prepared, fmt.Sprintf("%s %v gets=%d", netns, fams, getCount(p.client)))
}

func (p *preparingTables) Release() {
	p.released++
	p.releasedFirst = p.releasedFirst || len(p.applied) == 0
}

// TestAddPreparesDuringTheLookup checks that ADD lets the tables get ready
// just before the pod GET, with the families it will apply, and always
// releases them, after applying.
func TestAddPreparesDuringTheLookup(t *testing.T) {
	dual := fmt.Sprintf(prevResult100, "1.1.0", `,{"address":"fd00:244::5/64","interface":0}`)
	for _, tc := range []struct {
		name, ns, pod string
		objs          []runtime.Object
		wantPrepared  string
		wantApplied   bool
		wantErr       bool
	}{
		{name: "meshed", ns: "app", pod: "web", objs: []runtime.Object{pod("app", "web", nil, withSidecar)},
			wantPrepared: "/var/run/netns/x [IPv4 IPv6] gets=0", wantApplied: true},
		{name: "not meshed", ns: "app", pod: "web", objs: []runtime.Object{pod("app", "web", nil, nil)},
			wantPrepared: "/var/run/netns/x [IPv4 IPv6] gets=0"},
		{name: "pod not found", ns: "app", pod: "web", wantPrepared: "/var/run/netns/x [IPv4 IPv6] gets=0", wantErr: true},
		{name: "excluded: no lookup, nothing to prepare", ns: "kube-system", pod: "dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.objs...)
			pt := &preparingTables{fakeTables: h.tables, client: h.client}
			h.p.Tables = func(*netconf.NetConf, *slog.Logger) Tables { return pt }
			err := h.p.Add(cmdArgs(stdin(t, "1.1.0", nil, dual), tc.ns, tc.pod))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ADD: %v", err)
			}
			if got := strings.Join(pt.prepared, "; "); got != tc.wantPrepared {
				t.Errorf("Prepare calls %q, want %q", got, tc.wantPrepared)
			}
			if pt.released != 1 {
				t.Errorf("Release called %d times, want once", pt.released)
			}
			if applied := len(pt.applied) == 1; applied != tc.wantApplied {
				t.Errorf("applied %d, want applied=%v", len(pt.applied), tc.wantApplied)
			}
			if tc.wantApplied && pt.releasedFirst {
				t.Error("Release came before Apply")
			}
		})
	}
}
