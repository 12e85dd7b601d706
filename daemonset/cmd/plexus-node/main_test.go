package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/daemonset/repair"
)

func TestParseRun(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	c, node, _, err := parseRun([]string{"--cni-conf-dir", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "--node-name", "n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if node != "n1" || c.APIServer != "https://10.96.0.1:443" || c.Root != "/host" || c.CNIConfDir != "/var/lib/rancher/k3s/agent/etc/cni/net.d" || c.CNIBinDir != "/opt/cni/bin" {
		t.Fatalf("config %+v", c)
	}
	if c.Repair.Mode != repair.Apply || c.Repair.Resync != time.Minute || c.NetnsDir != "/run/netns" || c.At(c.NetnsDir) != "/host/run/netns" {
		t.Fatalf("repair defaults: %+v, netns dir %s", c.Repair, c.NetnsDir)
	}
	c, _, _, err = parseRun([]string{"--repair=delete", "--repair-resync=2m", "--netns-dir=/var/run/crio/ns"}, io.Discard)
	if err != nil || c.Repair.Mode != repair.Delete || c.Repair.Resync != 2*time.Minute || c.NetnsDir != "/var/run/crio/ns" {
		t.Fatalf("repair flags: %+v, %s, %v", c.Repair, c.NetnsDir, err)
	}
	for _, bad := range [][]string{{"--repair=fix"}, {"--netns-dir=run/netns"}} {
		if _, _, _, err := parseRun(bad, io.Discard); err == nil {
			t.Errorf("parseRun(%v) accepted", bad)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, _, err := parseRun(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "API server") {
		t.Fatalf("no API server: err = %v", err)
	}
}

func TestParseInstallNeedsRoot(t *testing.T) {
	if _, err := parseImage([]string{"--plugin-binary", "/x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--root") {
		t.Fatalf("err = %v", err)
	}
	c, err := parseImage([]string{"--root", "/img", "--plugin-binary", "/x", "--kubeconfig", "/var/lib/kubelet/kubeconfig"}, io.Discard)
	if err != nil || c.At(c.CNIBinDir) != "/img/opt/cni/bin" {
		t.Fatalf("%+v, %v", c, err)
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run([]string{"frobnicate"}, io.Discard, nil); err == nil {
		t.Fatal("unknown command accepted")
	}
}
