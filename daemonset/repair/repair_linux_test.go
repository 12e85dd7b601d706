package repair

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/daemonset/podnetns"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/nsmount"
)

// counters are iptables-save's packet counters and comment lines, which
// change without any rule changing.
var counters = regexp.MustCompile(`(?m)^#.*\n|\[\d+:\d+\]`)

// TestRepairInRealNamespace runs the controller against a real network
// namespace holding a pod's IP (on its loopback) and real iptables: the
// missing rules are applied in place, exactly the default set, one Event
// is recorded, and later passes change nothing.
func TestRepairInRealNamespace(t *testing.T) {
	nsmount.Root(t)
	ctx := context.Background()
	dir := t.TempDir()
	netns := nsmount.New(t, dir, "cni-repair")
	nsmount.Run(t, netns, "ip", "addr", "add", "10.99.0.5/32", "dev", "lo")
	nsmount.Run(t, netns, "ip", "addr", "add", "fd00:99::5/128", "dev", "lo")
	// A namespace of another pod, which must stay untouched.
	other := nsmount.New(t, dir, "cni-other")
	nsmount.Run(t, other, "ip", "addr", "add", "10.99.0.6/32", "dev", "lo")

	mode, reason, err := xtables.Resolve(ctx, xtables.Auto)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("iptables backend %s (%s)", mode, reason)
	save := func(netns string, fam rules.Family) string {
		bin := "iptables-" + string(mode) + "-save"
		if fam == rules.IPv6 {
			bin = "ip6tables-" + string(mode) + "-save"
		}
		return counters.ReplaceAllString(nsmount.Run(t, netns, bin, "-t", "nat"), "")
	}

	pod := meshedPod(func(p *corev1.Pod) {
		p.Status.PodIP = "10.99.0.5"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.99.0.5"}, {IP: "fd00:99::5"}}
	})
	client := fake.NewClientset(pod)
	finder, err := podnetns.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	conf, err := netconf.ParseConf([]byte(`{"type":"plexus-cni","kubeconfig":"/k"}`))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	deps := Deps{
		Client: client, Plugin: conf, Netns: finder, Metrics: m, Log: log,
		Tables: netnsrules.NewNetnsTables(mode, netnsrules.LockWait, log),
	}
	r, err := New(Config{Mode: Apply, Node: node, Resync: time.Second}, deps)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{r: r, client: client, metrics: m}

	otherBefore := save(other, rules.IPv4)
	start := time.Now()
	startRun(t, h)
	waitFor(t, "the repair", func() bool { return h.count("applied") == 1 })
	t.Logf("rules applied %v after the controller started (informer sync, netns scan, 2 reads, 1 apply, 2 reads)", time.Since(start).Round(time.Millisecond))

	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		saved := save(netns, fam)
		st, err := rules.ParseSave(saved)
		if err != nil {
			t.Fatal(err)
		}
		want, err := rules.Build(podcontract.Defaults(), fam)
		if err != nil {
			t.Fatal(err)
		}
		if err := rules.Compare(&want, st); err != nil {
			t.Errorf("%s after the repair: %v\n%s", fam, err, saved)
		}
		for _, line := range []string{
			":PLEXUS_INBOUND - ",
			":PLEXUS_OUTPUT - ",
			`-A PLEXUS_INBOUND -p tcp -m comment --comment "plexus/redirect-inbound" -j REDIRECT --to-ports 4143`,
			`-A PLEXUS_OUTPUT -p tcp -m comment --comment "plexus/redirect-outbound" -j REDIRECT --to-ports 4140`,
		} {
			if !strings.Contains(saved, line) {
				t.Errorf("%s nat table lacks %q:\n%s", fam, line, saved)
			}
		}
	}
	if got := save(other, rules.IPv4); got != otherBefore {
		t.Errorf("another namespace changed:\n--- before\n%s--- after\n%s", otherBefore, got)
	}
	evs, err := client.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 || evs.Items[0].Reason != ReasonRepaired {
		t.Fatalf("events %+v, want one %s", evs.Items, ReasonRepaired)
	}

	// Later passes (resyncs every second, and a direct Sync) change nothing.
	before := save(netns, rules.IPv4) + save(netns, rules.IPv6)
	checks := testutil.ToFloat64(m.Checked)
	waitFor(t, "two resync checks", func() bool { return testutil.ToFloat64(m.Checked) >= checks+2 })
	syncStart := time.Now()
	if got, err := r.Sync(ctx, pod); err != nil || got != Correct {
		t.Fatalf("second pass: Sync = %s, %v; want correct", got, err)
	}
	t.Logf("a check of a correct pod took %v (netns lookup, iptables-save per family)", time.Since(syncStart).Round(time.Microsecond))
	if after := save(netns, rules.IPv4) + save(netns, rules.IPv6); after != before {
		t.Errorf("a second pass changed the rules:\n--- before\n%s--- after\n%s", before, after)
	}
	if evs, _ := client.CoreV1().Events("shop").List(ctx, metav1.ListOptions{}); len(evs.Items) != 1 || h.count("applied") != 1 || h.count("failed") != 0 {
		t.Errorf("after more passes: %d events, applied=%v failed=%v; want 1, 1, 0", len(evs.Items), h.count("applied"), h.count("failed"))
	}
}
