package repair

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

const node = "node-1"

// memTables is a pod network namespace's nat table in memory: Apply makes
// it hold exactly the rule sets, as NetnsTables.Apply does.
type memTables struct {
	mu       sync.Mutex
	state    map[string]map[rules.Family]rules.State // netns -> family -> state
	applies  int
	applyErr error
}

func newMemTables() *memTables {
	return &memTables{state: map[string]map[rules.Family]rules.State{}}
}

func (m *memTables) Apply(_ context.Context, netns string, sets []rules.RuleSet) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.applyErr != nil {
		return m.applyErr
	}
	m.applies++
	m.state[netns] = map[rules.Family]rules.State{}
	for _, rs := range sets {
		m.state[netns][rs.Family] = rules.Saved(rs)
	}
	return nil
}

func (m *memTables) Current(_ context.Context, netns string, fams []rules.Family) (map[rules.Family]rules.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[rules.Family]rules.State{}
	for _, f := range fams {
		out[f] = m.state[netns][f]
	}
	return out, nil
}

func (m *memTables) applied() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applies
}

// ipNamespaces maps pod IPs to namespace paths.
type ipNamespaces map[netip.Addr]string

func (n ipNamespaces) Find(ips []netip.Addr) (string, error) {
	for _, ip := range ips {
		if p, ok := n[ip]; ok {
			return p, nil
		}
	}
	return "", errors.New("no namespace holds the pod's IPs")
}

type harness struct {
	r       *Repairer
	client  *fake.Clientset
	tables  *memTables
	metrics *Metrics
}

func newHarness(t *testing.T, mode Mode, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{client: fake.NewClientset(objs...)}
	h.r, h.tables, h.metrics = newRepairer(t, h.client, mode)
	return h
}

// newRepairer builds a Repairer on client with tables in memory and pod
// IPs 10.244.0.5 and fd00::5 in namespace /run/netns/cni-5.
func newRepairer(t *testing.T, client kubernetes.Interface, mode Mode) (*Repairer, *memTables, *Metrics) {
	t.Helper()
	tables := newMemTables()
	metrics := NewMetrics(prometheus.NewRegistry())
	conf, err := netconf.ParseConf([]byte(`{"type":"plexus-cni","kubeconfig":"/k","exclude_namespaces":["kube-system","infra"]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Mode: mode, Node: node, Resync: time.Second}, Deps{
		Client: client, Plugin: conf, Tables: tables,
		Netns:   ipNamespaces{netip.MustParseAddr("10.244.0.5"): "/run/netns/cni-5", netip.MustParseAddr("fd00::5"): "/run/netns/cni-5"},
		Metrics: metrics, Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, tables, metrics
}

// meshedPod is a running meshed pod on node-1 with IP 10.244.0.5, owned
// by a ReplicaSet.
func meshedPod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-1", UID: types.UID("uid-web-1"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: &yes}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app"}, {Name: podrules.ProxyContainerName}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func (h *harness) events(t *testing.T) []corev1.Event {
	t.Helper()
	list, err := h.client.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (h *harness) count(action string) float64 {
	return testutil.ToFloat64(h.metrics.Repairs.WithLabelValues(action))
}

func defaultSets(t *testing.T, fams ...rules.Family) map[rules.Family]rules.State {
	t.Helper()
	out := map[rules.Family]rules.State{}
	for _, f := range fams {
		rs, err := rules.Build(podcontract.Defaults(), f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = rules.Saved(rs)
	}
	return out
}

func TestSyncSkips(t *testing.T) {
	now := metav1.Now()
	for name, pod := range map[string]*corev1.Pod{
		"not meshed":         meshedPod(func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }),
		"host network":       meshedPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		"excluded namespace": meshedPod(func(p *corev1.Pod) { p.Namespace = "infra" }),
		"kube-system":        meshedPod(func(p *corev1.Pod) { p.Namespace = "kube-system" }),
		"node agent":         meshedPod(func(p *corev1.Pod) { p.Namespace, p.Name = "plexus-system", "plexus-node-abcde" }),
		"other node":         meshedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }),
		"pending":            meshedPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		"terminating":        meshedPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		"no IP yet":          meshedPod(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Apply, pod)
			got, err := h.r.Sync(context.Background(), pod)
			if err != nil || got != Skipped {
				t.Fatalf("Sync = %s, %v; want skipped", got, err)
			}
			if h.tables.applied() != 0 || len(h.events(t)) != 0 || testutil.ToFloat64(h.metrics.Checked) != 0 {
				t.Errorf("a skipped pod was checked (%v), applied (%d) or got events (%d)",
					testutil.ToFloat64(h.metrics.Checked), h.tables.applied(), len(h.events(t)))
			}
		})
	}
}

func TestSyncRulesPresent(t *testing.T) {
	pod := meshedPod()
	h := newHarness(t, Apply, pod)
	h.tables.state["/run/netns/cni-5"] = defaultSets(t, rules.IPv4)
	got, err := h.r.Sync(context.Background(), pod)
	if err != nil || got != Correct {
		t.Fatalf("Sync = %s, %v; want correct", got, err)
	}
	if h.tables.applied() != 0 || len(h.events(t)) != 0 || testutil.ToFloat64(h.metrics.Checked) != 1 {
		t.Errorf("pod with its rules: %d applies, %d events, %v checks", h.tables.applied(), len(h.events(t)), testutil.ToFloat64(h.metrics.Checked))
	}
}

func TestSyncAppliesMissingRulesOnce(t *testing.T) {
	dual := meshedPod(func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::5"}) })
	h := newHarness(t, Apply, dual)
	for i, want := range []Outcome{Applied, Correct, Correct} {
		got, err := h.r.Sync(context.Background(), dual)
		if err != nil || got != want {
			t.Fatalf("Sync #%d = %s, %v; want %s", i, got, err, want)
		}
	}
	if got, want := h.tables.state["/run/netns/cni-5"], defaultSets(t, rules.IPv4, rules.IPv6); len(got) != 2 ||
		podrules.Diff(podrules.Decision{Mesh: true, Config: podcontract.Defaults()}, []rules.Family{rules.IPv4, rules.IPv6}, got) != nil {
		t.Errorf("applied state %+v, want the default IPv4 and IPv6 sets %+v", got, want)
	}
	evs := h.events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events, want exactly one: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Type != corev1.EventTypeNormal || ev.Reason != ReasonRepaired || ev.InvolvedObject.UID != dual.UID ||
		ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != "web-1" || ev.Source.Component != Component ||
		!strings.Contains(ev.Message, "missing") {
		t.Errorf("event %+v", ev)
	}
	if h.count("applied") != 1 || h.count("failed") != 0 || testutil.ToFloat64(h.metrics.Checked) != 3 {
		t.Errorf("applied=%v failed=%v checked=%v", h.count("applied"), h.count("failed"), testutil.ToFloat64(h.metrics.Checked))
	}
}

func TestSyncReplacesWrongRules(t *testing.T) {
	pod := meshedPod()
	h := newHarness(t, Apply, pod)
	wrong := defaultSets(t, rules.IPv4)
	st := wrong[rules.IPv4]
	st.Chains[rules.ChainOutput] = st.Chains[rules.ChainOutput][1:] // proxy-uid RETURN gone
	h.tables.state["/run/netns/cni-5"] = wrong
	if got, err := h.r.Sync(context.Background(), pod); err != nil || got != Applied {
		t.Fatalf("Sync = %s, %v; want applied", got, err)
	}
	if evs := h.events(t); len(evs) != 1 || !strings.Contains(evs[0].Message, "different") {
		t.Errorf("events %+v, want one saying the rules were different", evs)
	}
}

// TestSyncSelfCallRulesFollowTheProxy: the self-call rules are gated on
// the proxy's environment (podcontract.EnvInboundSource). A pod whose proxy
// predates them is correct with the rules it has (an agent upgraded
// before the pods reports no drift and writes nothing that would loop
// their inbound dials); a pod whose proxy binds the inbound source but
// got its rules from an older plugin is repaired to have them.
func TestSyncSelfCallRulesFollowTheProxy(t *testing.T) {
	old := meshedPod()
	h := newHarness(t, Apply, old)
	h.tables.state["/run/netns/cni-5"] = defaultSets(t, rules.IPv4)
	if got, err := h.r.Sync(context.Background(), old); err != nil || got != Correct {
		t.Fatalf("old proxy with the old rules: Sync = %s, %v; want correct", got, err)
	}

	gated := meshedPod(func(p *corev1.Pod) {
		p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: podcontract.EnvInboundSource, Value: podcontract.DefaultInboundSource}}
	})
	h = newHarness(t, Apply, gated)
	h.tables.state["/run/netns/cni-5"] = defaultSets(t, rules.IPv4)
	for i, want := range []Outcome{Applied, Correct} {
		if got, err := h.r.Sync(context.Background(), gated); err != nil || got != want {
			t.Fatalf("new proxy with the old rules: Sync #%d = %s, %v; want %s", i, got, err, want)
		}
	}
	out := h.tables.state["/run/netns/cni-5"][rules.IPv4].Chains[rules.ChainOutput]
	if len(out) < 2 || !strings.Contains(out[0], "-s 127.0.0.6/32 -o lo") || !strings.Contains(out[1], "-j "+rules.ChainInbound) {
		t.Errorf("repaired output chain %q, want the inbound source's RETURN and the self-call jump first", out)
	}
	if evs := h.events(t); len(evs) != 1 || evs[0].Reason != ReasonRepaired || !strings.Contains(evs[0].Message, "different") {
		t.Errorf("events %+v, want one saying the rules were different", evs)
	}
}

func TestSyncApplyFailure(t *testing.T) {
	pod := meshedPod()
	h := newHarness(t, Apply, pod)
	h.tables.applyErr = errors.New("iptables-restore: exit status 4")
	ctx := context.Background()
	for range 3 {
		_, err := h.r.Sync(ctx, pod)
		if err == nil || !strings.Contains(err.Error(), "exit status 4") || !strings.Contains(err.Error(), "shop/web-1") {
			t.Fatalf("Sync err = %v, want the iptables error naming the pod", err)
		}
		h.r.Failed(ctx, pod, err)
	}
	evs := h.events(t)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Reason != ReasonRepairFailed {
		t.Fatalf("events %+v, want one Warning %s for three failures", evs, ReasonRepairFailed)
	}
	if h.count("failed") != 3 || h.count("applied") != 0 {
		t.Errorf("failed=%v applied=%v", h.count("failed"), h.count("applied"))
	}
	// Once repaired, a later failure is reported again.
	h.tables.applyErr = nil
	if got, err := h.r.Sync(ctx, pod); err != nil || got != Applied {
		t.Fatalf("Sync = %s, %v", got, err)
	}
	if evs := h.events(t); len(evs) != 2 || evs[1].Reason != ReasonRepaired {
		t.Errorf("events after the repair: %+v", evs)
	}
}

func TestSyncDeleteMode(t *testing.T) {
	pod := meshedPod()
	h := newHarness(t, Delete, pod)
	if got, err := h.r.Sync(context.Background(), pod); err != nil || got != Deleted {
		t.Fatalf("Sync = %s, %v; want deleted", got, err)
	}
	if _, err := h.client.CoreV1().Pods("shop").Get(context.Background(), "web-1", metav1.GetOptions{}); err == nil {
		t.Error("pod still exists")
	}
	evs := h.events(t)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Reason != ReasonMissing {
		t.Fatalf("events %+v, want one Warning %s", evs, ReasonMissing)
	}
	if h.tables.applied() != 0 || h.count("deleted") != 1 {
		t.Errorf("applies=%d deleted=%v", h.tables.applied(), h.count("deleted"))
	}
}

func TestSyncDeleteModeLeavesBarePods(t *testing.T) {
	bare := meshedPod(func(p *corev1.Pod) { p.OwnerReferences = nil })
	h := newHarness(t, Delete, bare)
	for range 2 {
		if got, err := h.r.Sync(context.Background(), bare); err != nil || got != Reported {
			t.Fatalf("Sync = %s, %v; want reported", got, err)
		}
	}
	if _, err := h.client.CoreV1().Pods("shop").Get(context.Background(), "web-1", metav1.GetOptions{}); err != nil {
		t.Errorf("a pod without controller was deleted: %v", err)
	}
	if evs := h.events(t); len(evs) != 1 || !strings.Contains(evs[0].Message, "no controller") {
		t.Errorf("events %+v, want one saying no controller would recreate it", evs)
	}
}

func TestSyncOffOnlyReports(t *testing.T) {
	pod := meshedPod()
	h := newHarness(t, Off, pod)
	for range 3 {
		if got, err := h.r.Sync(context.Background(), pod); err != nil || got != Reported {
			t.Fatalf("Sync = %s, %v; want reported", got, err)
		}
	}
	if h.tables.applied() != 0 {
		t.Error("mode off applied rules")
	}
	if evs := h.events(t); len(evs) != 1 || evs[0].Reason != ReasonMissing {
		t.Errorf("events %+v, want one %s for three checks", evs, ReasonMissing)
	}
	if h.count("reported") != 3 {
		t.Errorf("reported=%v, want 3", h.count("reported"))
	}
}

func TestSyncNamespaceNotFound(t *testing.T) {
	pod := meshedPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.77"}} })
	h := newHarness(t, Apply, pod)
	if _, err := h.r.Sync(context.Background(), pod); err == nil || !strings.Contains(err.Error(), "shop/web-1") {
		t.Fatalf("Sync err = %v, want one naming the pod", err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Node: "n"}
	if err := c.Validate(); err != nil || c.Mode != Apply || c.Resync != time.Minute || c.Workers != 2 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for name, bad := range map[string]Config{
		"mode":    {Node: "n", Mode: "fix"},
		"node":    {Mode: Apply},
		"resync":  {Node: "n", Resync: time.Millisecond},
		"workers": {Node: "n", Workers: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("bad %s accepted: %+v", name, bad)
		}
	}
}

// TestSyncUsesAdmittedSettings: a pod admitted with skip-inbound-ports 25
// whose annotation was then edited to skip far more (and whose outbound
// skip was added afterwards) is repaired with the rules it was admitted
// with, which the injector recorded in the proxy's environment; the
// rules the edited annotations ask for are replaced, not kept.
func TestSyncUsesAdmittedSettings(t *testing.T) {
	admitted := map[string]string{podcontract.AnnotationSkipInboundPorts: "25"}
	pod := meshedPod(func(p *corev1.Pod) {
		p.Annotations = map[string]string{
			podcontract.AnnotationSkipInboundPorts:    "1-4142",
			podcontract.AnnotationSkipOutboundSubnets: "0.0.0.0/0",
		}
		p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: podcontract.EnvAdmitted, Value: podcontract.EncodeAdmitted(admitted)}}
	})
	fams := []rules.Family{rules.IPv4}
	decision := func(a map[string]string) podrules.Decision {
		t.Helper()
		cfg, err := podcontract.FromAnnotations(podcontract.Defaults(), a)
		if err != nil {
			t.Fatal(err)
		}
		return podrules.Decision{Mesh: true, Config: cfg}
	}
	want, weakened := decision(admitted), decision(pod.Annotations)
	weakenedSets, err := podrules.Want(weakened, fams)
	if err != nil {
		t.Fatal(err)
	}

	for name, start := range map[string]map[rules.Family]rules.State{
		"rules missing": nil,
		// What a repair from the edited annotations would have written.
		"rules from the edited annotations": {rules.IPv4: rules.Saved(weakenedSets[0])},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Apply, pod)
			if start != nil {
				h.tables.state["/run/netns/cni-5"] = start
			}
			if got, err := h.r.Sync(context.Background(), pod); err != nil || got != Applied {
				t.Fatalf("Sync = %s, %v; want applied", got, err)
			}
			got := h.tables.state["/run/netns/cni-5"]
			if err := podrules.Diff(want, fams, got); err != nil {
				t.Errorf("rules after the repair are not the admitted ones: %v", err)
			}
			if podrules.Diff(weakened, fams, got) == nil {
				t.Error("rules after the repair are those of the edited annotations")
			}
			if got, err := h.r.Sync(context.Background(), pod); err != nil || got != Correct {
				t.Errorf("second Sync = %s, %v; want correct", got, err)
			}
		})
	}
}
