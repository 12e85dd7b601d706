package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

func TestDecidePod(t *testing.T) {
	conf := &netconf.NetConf{Kubeconfig: "/k", Proxy: netconf.ProxyConf{InboundPort: 5143}}
	for _, tc := range []struct {
		name   string
		ns     string
		pod    string
		ann    map[string]string
		mutate func(*corev1.Pod)
		mesh   bool
		reason string
	}{
		{"meshed", "app", "web-1", nil, withSidecar, true, "has a plexus-proxy"},
		{"native sidecar", "app", "web-1", nil, withNativeSidecar, true, "has a plexus-proxy"},
		{"no proxy", "app", "web-1", nil, nil, false, "has no plexus-proxy"},
		{"excluded namespace", "kube-system", "dns", nil, withSidecar, false, "exclude_namespaces"},
		{"node agent", netconf.NodeAgentNamespace, netconf.NodeAgentPodPrefix + "x7k2p", nil, withSidecar, false, "node agent"},
		{"control plane is meshed", netconf.NodeAgentNamespace, "plexus-destination-1", nil, withSidecar, true, "has a plexus-proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := podrules.DecidePod(conf, asPod(t, pod(tc.ns, tc.pod, tc.ann, tc.mutate)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Mesh != tc.mesh || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("DecidePod = %+v, want mesh=%v and a reason with %q", d, tc.mesh, tc.reason)
			}
			if d.Mesh && d.Config.InboundPort != 5143 {
				t.Errorf("inbound port %d, want the plugin config's 5143", d.Config.InboundPort)
			}
		})
	}

	_, err := podrules.DecidePod(conf, asPod(t, pod("app", "web-1", map[string]string{"config.plexus.dev/skip-inbound-ports": "x"}, withSidecar)))
	if err == nil || errors.Is(err, podrules.ErrInvalidConfig) || !strings.Contains(err.Error(), "app/web-1") {
		t.Errorf("bad annotation: err = %v, want one naming the pod and not ErrInvalidConfig", err)
	}
	bad := &netconf.NetConf{Kubeconfig: "/k", SkipOutboundPorts: "nope"}
	if _, err := podrules.DecidePod(bad, asPod(t, pod("app", "web-1", nil, withSidecar))); !errors.Is(err, podrules.ErrInvalidConfig) {
		t.Errorf("bad plugin config: err = %v, want ErrInvalidConfig", err)
	}
}

// withAdmitted gives the proxy container the settings the injector
// recorded at admission.
func withAdmitted(admitted map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		withNativeSidecar(p)
		proxy := &p.Spec.InitContainers[len(p.Spec.InitContainers)-1]
		proxy.Env = append(proxy.Env,
			corev1.EnvVar{Name: "PLEXUS_PROXY_INBOUND_PORT", Value: "4143"},
			corev1.EnvVar{Name: podcontract.EnvAdmitted, Value: podcontract.EncodeAdmitted(admitted)})
	}
}

// TestDecidePodAdmittedSettings: a pod's current annotations do not
// change its rules once the injector recorded the admitted ones in the
// proxy's environment (annotations can be edited on a running pod, a
// container's environment cannot).
func TestDecidePodAdmittedSettings(t *testing.T) {
	conf := &netconf.NetConf{Kubeconfig: "/k"}
	admitted := map[string]string{podcontract.AnnotationSkipInboundPorts: "25", podcontract.AnnotationProxyUID: "2200"}
	edited := map[string]string{
		podcontract.AnnotationSkipInboundPorts:    "1-4142",
		podcontract.AnnotationSkipOutboundSubnets: "0.0.0.0/0",
		podcontract.AnnotationProxyUID:            "1000",
	}
	for _, tc := range []struct {
		name       string
		ann        map[string]string
		mutate     func(*corev1.Pod)
		skipIn     string
		skipOutNet int
		uid        uint32
	}{
		{"annotations edited after admission", edited, withAdmitted(admitted), "[25]", 0, 2200},
		{"annotations removed after admission", nil, withAdmitted(admitted), "[25]", 0, 2200},
		{"admitted with none, annotations added", edited, withAdmitted(nil), "[]", 0, podcontract.DefaultProxyUID},
		{"plain container", edited, func(p *corev1.Pod) {
			withSidecar(p)
			p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: podcontract.EnvAdmitted, Value: podcontract.EncodeAdmitted(admitted)}}
		}, "[25]", 0, 2200},
		// Injected before the injector recorded settings: the annotations.
		{"no admitted settings", edited, withNativeSidecar, "[1-4142]", 1, 1000},
		// Only the proxy's own environment counts.
		{"variable on another container", edited, func(p *corev1.Pod) {
			withNativeSidecar(p)
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: podcontract.EnvAdmitted, Value: "{}"}}
		}, "[1-4142]", 1, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := podrules.DecidePod(conf, asPod(t, pod("app", "web-1", tc.ann, tc.mutate)))
			if err != nil || !d.Mesh {
				t.Fatalf("DecidePod = %+v, %v", d, err)
			}
			if got := fmt.Sprint(d.Config.SkipInboundPorts); got != tc.skipIn {
				t.Errorf("skip inbound ports %s, want %s", got, tc.skipIn)
			}
			if len(d.Config.SkipOutboundSubnets) != tc.skipOutNet || d.Config.ProxyUID != tc.uid {
				t.Errorf("skip outbound subnets %v, proxy UID %d; want %d subnets, UID %d",
					d.Config.SkipOutboundSubnets, d.Config.ProxyUID, tc.skipOutNet, tc.uid)
			}
		})
	}

	bad := withAdmitted(nil)
	_, err := podrules.DecidePod(conf, asPod(t, pod("app", "web-1", nil, func(p *corev1.Pod) {
		bad(p)
		p.Spec.InitContainers[0].Env[1].Value = `{"config.plexus.dev/skip-inbound-ports":"x"}`
	})))
	if err == nil || !strings.Contains(err.Error(), "app/web-1") || !strings.Contains(err.Error(), "skip-inbound-ports") {
		t.Errorf("malformed admitted setting: err = %v, want one naming the pod and the setting", err)
	}
	_, err = podrules.DecidePod(conf, asPod(t, pod("app", "web-1", nil, func(p *corev1.Pod) {
		bad(p)
		p.Spec.InitContainers[0].Env[1].Value = ""
	})))
	if err == nil || !strings.Contains(err.Error(), podcontract.EnvAdmitted) {
		t.Errorf("empty admitted settings: err = %v, want one naming %s", err, podcontract.EnvAdmitted)
	}
}

// withInboundSource gives the proxy container the inbound source the
// injector sets (v) after its admitted settings.
func withInboundSource(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		withAdmitted(nil)(p)
		proxy := &p.Spec.InitContainers[len(p.Spec.InitContainers)-1]
		proxy.Env = append(proxy.Env, corev1.EnvVar{Name: podcontract.EnvInboundSource, Value: v})
	}
}

// TestDecidePodInboundSource: the self-call rules are gated per pod on
// the proxy's own environment, so a pod whose proxy predates them keeps
// (and is compared against) the rules it has, while a new pod's missing
// ones are drift.
func TestDecidePodInboundSource(t *testing.T) {
	conf := &netconf.NetConf{Kubeconfig: "/k"}
	fams := []rules.Family{rules.IPv4, rules.IPv6}
	decide := func(mutate func(*corev1.Pod)) podrules.Decision {
		t.Helper()
		d, err := podrules.DecidePod(conf, asPod(t, pod("app", "web-1", nil, mutate)))
		if err != nil || !d.Mesh {
			t.Fatalf("DecidePod = %+v, %v", d, err)
		}
		return d
	}
	saved := func(d podrules.Decision) map[rules.Family]rules.State {
		t.Helper()
		sets, err := podrules.Want(d, fams)
		if err != nil {
			t.Fatal(err)
		}
		st := map[rules.Family]rules.State{}
		for _, rs := range sets {
			st[rs.Family] = rules.Saved(rs)
		}
		return st
	}

	old := decide(withAdmitted(nil))
	if old.Config.InboundSource != nil {
		t.Fatalf("proxy without %s: inbound source %v", podcontract.EnvInboundSource, old.Config.InboundSource)
	}
	gated := decide(withInboundSource(podcontract.DefaultInboundSource))
	if got := fmt.Sprint(gated.Config.InboundSource); got != "[127.0.0.6 ::1]" {
		t.Fatalf("inbound source %s, want [127.0.0.6 ::1]", got)
	}
	oldRules, newRules := saved(old), saved(gated)
	if err := podrules.Diff(old, fams, oldRules); err != nil {
		t.Errorf("old proxy, old rules: %v", err)
	}
	if err := podrules.Diff(old, fams, newRules); err == nil || !strings.Contains(err.Error(), "unexpected") || !strings.Contains(err.Error(), "plexus/self-call") {
		t.Errorf("old proxy with the self-call rules (its inbound dials would loop): %v, want them unexpected", err)
	}
	if err := podrules.Diff(gated, fams, newRules); err != nil {
		t.Errorf("new proxy, new rules: %v", err)
	}
	err := podrules.Diff(gated, fams, oldRules)
	if err == nil || !strings.Contains(err.Error(), "missing   -A PLEXUS_OUTPUT -s 127.0.0.6/32 -o lo") || !strings.Contains(err.Error(), "missing   -A PLEXUS_OUTPUT -s ::1/128 -o lo") {
		t.Errorf("new proxy with old rules: %v, want both families' rules missing", err)
	}

	if d := decide(withInboundSource("")); d.Config.InboundSource != nil {
		t.Errorf("empty %s: inbound source %v", podcontract.EnvInboundSource, d.Config.InboundSource)
	}
	other := decide(func(p *corev1.Pod) {
		withAdmitted(nil)(p)
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: podcontract.EnvInboundSource, Value: podcontract.DefaultInboundSource}}
	})
	if other.Config.InboundSource != nil {
		t.Errorf("variable on the app container counted: %v", other.Config.InboundSource)
	}
	_, err = podrules.DecidePod(conf, asPod(t, pod("app", "web-1", nil, withInboundSource("::6"))))
	if err == nil || errors.Is(err, podrules.ErrInvalidConfig) || !strings.Contains(err.Error(), "app/web-1") || !strings.Contains(err.Error(), podcontract.EnvInboundSource) {
		t.Errorf("malformed inbound source: err = %v, want one naming the pod and %s", err, podcontract.EnvInboundSource)
	}
}

func TestFamilies(t *testing.T) {
	for _, tc := range []struct {
		ips  []string
		want []rules.Family
	}{
		{nil, []rules.Family{rules.IPv4}},
		{[]string{"10.0.0.1"}, []rules.Family{rules.IPv4}},
		{[]string{"::ffff:10.0.0.1"}, []rules.Family{rules.IPv4}},
		{[]string{"10.0.0.1", "fd00::1"}, []rules.Family{rules.IPv4, rules.IPv6}},
		{[]string{"fd00::1"}, []rules.Family{rules.IPv4, rules.IPv6}},
	} {
		var addrs []netip.Addr
		for _, s := range tc.ips {
			addrs = append(addrs, netip.MustParseAddr(s))
		}
		if got := podrules.Families(addrs); !slices.Equal(got, tc.want) {
			t.Errorf("Families(%v) = %v, want %v", tc.ips, got, tc.want)
		}
	}
}

func TestDiff(t *testing.T) {
	meshed := podrules.Decision{Mesh: true, Config: podcontract.Defaults()}
	fams := []rules.Family{rules.IPv4, rules.IPv6}
	sets, err := podrules.Want(meshed, fams)
	if err != nil || len(sets) != 2 {
		t.Fatalf("Want = %v, %v", sets, err)
	}
	complete := map[rules.Family]rules.State{}
	for _, rs := range sets {
		complete[rs.Family] = rules.Saved(rs)
	}
	if err := podrules.Diff(meshed, fams, complete); err != nil {
		t.Errorf("complete rules: %v", err)
	}
	onlyV4 := map[rules.Family]rules.State{rules.IPv4: complete[rules.IPv4]}
	if err := podrules.Diff(meshed, fams, onlyV4); err == nil || !strings.Contains(err.Error(), "IPv6") {
		t.Errorf("IPv6 missing: err = %v", err)
	}
	if err := podrules.Diff(podrules.Decision{}, fams, map[rules.Family]rules.State{}); err != nil {
		t.Errorf("not meshed, no rules: %v", err)
	}
	if err := podrules.Diff(podrules.Decision{}, fams, complete); err == nil {
		t.Error("not meshed but rules present: no error")
	}
	if got, err := podrules.Want(podrules.Decision{}, fams); err != nil || got != nil {
		t.Errorf("Want(not meshed) = %v, %v", got, err)
	}
}

// asPod hands p to the plugin as the API server would: as JSON.
func asPod(t *testing.T, p *corev1.Pod) *podrules.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Kind, p.APIVersion = "Pod", "v1"
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := podrules.DecodePod("application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
