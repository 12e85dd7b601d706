package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNoHeavyDependencies keeps the plugin binary small and quick to start:
// gRPC and Prometheus must never be linked into it, nor anything of
// k8s.io/ (client-go, api, apimachinery, klog), whose package init alone
// costs milliseconds of every CNI call (the pod GET is plain net/http
// decoding a minimal plugin.Pod, see plugin.HTTPPodGetter).
func TestNoHeavyDependencies(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !contains(deps, "github.com/containernetworking/cni/pkg/skel") {
		t.Fatalf("go list -deps returned an implausible list (%d packages, no skel)", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"google.golang.org/grpc", "github.com/prometheus/", "k8s.io/"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("plexus-cni links %s (banned prefix %s)", d, banned)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
