package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseRun(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	c, node, err := parseRun([]string{"--cni-conf-dir", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "--node-name", "n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if node != "n1" || c.APIServer != "https://10.96.0.1:443" || c.Root != "/host" || c.CNIConfDir != "/var/lib/rancher/k3s/agent/etc/cni/net.d" || c.CNIBinDir != "/opt/cni/bin" {
		t.Fatalf("config %+v", c)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, err := parseRun(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "API server") {
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
