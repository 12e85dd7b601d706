package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

func TestParseConfAndPodBase(t *testing.T) {
	data := []byte(`{"cniVersion":"1.1.0","name":"n","type":"plexus-cni","kubeconfig":"/k",
		"exclude_namespaces":[],"iptables_mode":"nft","log_level":"debug",
		"proxy":{"inbound_port":5143,"outbound_port":5140,"admin_port":5191,"uid":3000,"gid":3001},
		"skip_outbound_ports":[25,"8000-8100"],"skip_inbound_ports":"22",
		"skip_outbound_subnets":["169.254.169.254","fd00::/8"],"skip_inbound_subnets":"10.0.0.0/8"}`)
	conf, err := netconf.ParseConf(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(conf.Excluded()) != 0 {
		t.Errorf("explicit empty exclude list became %v", conf.Excluded())
	}
	base, err := conf.PodBase()
	if err != nil {
		t.Fatal(err)
	}
	want := podcontract.Config{
		InboundPort: 5143, OutboundPort: 5140, AdminPort: 5191, ProxyUID: 3000, ProxyGID: 3001,
		SkipInboundPorts:    []podcontract.PortRange{{First: 22, Last: 22}},
		SkipOutboundPorts:   []podcontract.PortRange{{First: 25, Last: 25}, {First: 8000, Last: 8100}},
		SkipInboundSubnets:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		SkipOutboundSubnets: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("fd00::/8")},
	}
	if !reflect.DeepEqual(base, want) {
		t.Fatalf("PodBase\n got %+v\nwant %+v", base, want)
	}

	// Defaults.
	conf, err = netconf.ParseConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"plexus-cni","kubeconfig":"/k"}`))
	if err != nil || conf.Validate() != nil {
		t.Fatalf("minimal config: %v / %v", err, conf.Validate())
	}
	if got := conf.Excluded(); !reflect.DeepEqual(got, []string{"kube-system"}) {
		t.Errorf("default exclude list %v", got)
	}
	if base, _ := conf.PodBase(); !reflect.DeepEqual(base, podcontract.Defaults()) {
		t.Errorf("default pod base %+v", base)
	}

	for name, bad := range map[string]string{
		"not json":        `{`,
		"list type":       `{"kubeconfig":"/k","skip_outbound_ports":{"a":1}}`,
		"list item":       `{"kubeconfig":"/k","skip_outbound_ports":[true]}`,
		"bad prevResult":  `{"cniVersion":"1.0.0","kubeconfig":"/k","prevResult":{"ips":"nope"}}`,
		"prevResult type": `{"cniVersion":"1.0.0","kubeconfig":"/k","prevResult":[1]}`,
	} {
		if _, err := netconf.ParseConf([]byte(bad)); err == nil {
			t.Errorf("%s: ParseConf accepted %s", name, bad)
		}
	}
	for name, bad := range map[string]string{
		"empty namespace":                           `{"kubeconfig":"/k","exclude_namespaces":[""]}`,
		"relative report socket":                    `{"kubeconfig":"/k","report_socket":"plexus/reports.sock"}`,
		"uid 0 is unset, gid clash ok; ports clash": `{"kubeconfig":"/k","proxy":{"admin_port":4143}}`,
	} {
		conf, err := netconf.ParseConf([]byte(bad))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if conf.Validate() == nil {
			t.Errorf("%s: Validate accepted %s", name, bad)
		}
	}
}

func TestNonKubernetesInvocationPassesThrough(t *testing.T) {
	h := newHarness(t)
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	args := cmdArgs(stdin(t, "1.0.0", nil, prev), "x", "y")
	args.Args = "IgnoreUnknown=1"
	if err := h.p.Add(args); err != nil {
		t.Fatal(err)
	}
	if getCount(h.client) != 0 || len(h.tables.applied) != 0 || h.out.String() != prev {
		t.Fatalf("GETs %d, applied %d, out %s", getCount(h.client), len(h.tables.applied), h.out)
	}
	args.Args = "K8S_POD_NAME=a;BOGUS"
	err := h.p.Add(args)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidEnvironmentVariables {
		t.Fatalf("malformed CNI_ARGS: %v", err)
	}
}

func TestFileLogger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cni.log")
	log, done := FileLogger(&netconf.NetConf{LogFile: path, LogLevel: "warn"})
	log.Info("hidden")
	log.Warn("shown", "k", "v")
	done()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, "hidden") || !strings.Contains(s, `msg=shown`) || !strings.Contains(s, "plugin=plexus-cni") {
		t.Fatalf("log file content:\n%s", s)
	}
}

func TestPodUIDMismatch(t *testing.T) {
	p := pod("app", "web", nil, withSidecar)
	p.UID = "new-uid"
	h := newHarness(t, p)
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	args := cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web")
	args.Args += ";K8S_POD_UID=old-uid"
	err := h.p.Add(args)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "replaced") {
		t.Fatalf("UID mismatch: %v", err)
	}
	if len(h.tables.applied) != 0 {
		t.Fatal("rules applied for a replaced pod")
	}
	args = cmdArgs(stdin(t, "1.0.0", nil, prev), "app", "web")
	args.Args += ";K8S_POD_UID=new-uid"
	if err := h.p.Add(args); err != nil || len(h.tables.applied) != 1 {
		t.Fatalf("matching UID: %v, applied %d", err, len(h.tables.applied))
	}
}
