package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gatewayAPIFiles are the Gateway API CRDs Plexus installs: HTTPRoute and
// GRPCRoute, nothing else (ARCHITECTURE.md §8).
var gatewayAPIFiles = []string{
	"gateway.networking.k8s.io_grpcroutes.yaml",
	"gateway.networking.k8s.io_httproutes.yaml",
}

// TestGatewayAPICRDsMatchModule fails when deploy/crds/gateway-api holds
// anything but verbatim copies of the standard-channel HTTPRoute and
// GRPCRoute CRDs of the sigs.k8s.io/gateway-api version in go.mod.
func TestGatewayAPICRDsMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("finding the sigs.k8s.io/gateway-api module: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("sigs.k8s.io/gateway-api is not downloaded: run go mod download")
	}
	embedded, err := fs.Glob(Manifests, "crds/gateway-api/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range embedded {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			names = append(names, b)
		}
	}
	if !slices.Equal(names, gatewayAPIFiles) {
		t.Errorf("deploy/crds/gateway-api holds %v, want exactly %v", names, gatewayAPIFiles)
	}
	for _, name := range gatewayAPIFiles {
		want, err := os.ReadFile(filepath.Join(dir, "config", "crd", "standard", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(Manifests, "crds/gateway-api/"+name)
		if err != nil {
			t.Fatalf("%v (make gateway-crds copies it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/crds/gateway-api/%s differs from the module's copy in %s: run make gateway-crds, never edit it", name, dir)
		}
	}
}
