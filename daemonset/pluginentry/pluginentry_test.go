package pluginentry

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	out, err := Build([]byte(`{"log_level":"debug","exclude_namespaces":["kube-system","infra"],"proxy":{"uid":3000}}`), "/var/lib/plexus/plexus-cni.kubeconfig",
		Sockets{Report: "/var/lib/plexus/reports.sock", Pods: "/var/lib/plexus/pods.sock"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m["type"] != "plexus-cni" || m["kubeconfig"] != "/var/lib/plexus/plexus-cni.kubeconfig" || m["log_level"] != "debug" ||
		m["report_socket"] != "/var/lib/plexus/reports.sock" || m["pod_socket"] != "/var/lib/plexus/pods.sock" {
		t.Fatalf("entry = %s", out)
	}
	out, err = Build([]byte(`{"report_socket":"/admin.sock"}`), "/k", Sockets{})
	if err != nil || !strings.Contains(string(out), `"report_socket":"/admin.sock"`) {
		t.Fatalf("no agent socket: the config's report_socket is kept: %s, %v", out, err)
	}
	if out, err := Build(nil, "/k", Sockets{}); err != nil || strings.Contains(string(out), "report_socket") || strings.Contains(string(out), "pod_socket") {
		t.Fatalf("empty config: %s, %v", out, err)
	}
}

func TestBuildRejects(t *testing.T) {
	for _, tc := range []struct{ config, kubeconfig, want string }{
		{`{"log_level":"loud"}`, "/k", "log_level"},
		{`{"iptables_mode":"ebpf"}`, "/k", "ebpf"},
		{`{"proxy":{"inbound_port":70000}}`, "/k", "plugin config"},
		{`{"type":"bridge"}`, "/k", "type"},
		{`{"name":"x"}`, "/k", "name"},
		{`{`, "/k", "plugin config"},
		{`{}`, "", "kubeconfig"},
		{`{"report_socket":"reports.sock"}`, "/k", "report_socket"},
	} {
		_, err := Build([]byte(tc.config), tc.kubeconfig, Sockets{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%s, %q) err = %v, want one mentioning %q", tc.config, tc.kubeconfig, err, tc.want)
		}
	}
}
