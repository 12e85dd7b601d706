package inject

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const testAnchors = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"

func testConfig() Config {
	return Config{
		ProxyImage: "plexus.dev/plexus-proxy:dev", ProxyVersion: "dev",
		TrustDomain: "cluster.local", ControlNamespace: "plexus-system", ClusterDomain: "cluster.local",
		TrustAnchorsPEM: testAnchors, Resources: DefaultResources(),
	}
}

// testCase is one testdata/*.yaml input: a namespace and a pod.
type testCase struct {
	Namespace *corev1.Namespace `json:"namespace"`
	Pod       corev1.Pod        `json:"pod"`
}

// TestGolden runs every testdata/*.yaml case through Decide and Patch,
// applies the patch with a real JSON-patch implementation, and compares
// the resulting pod (or the decision, or the error) with the .golden file.
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*.yaml")
	if len(cases) < 10 {
		t.Fatalf("found %d cases in testdata, want at least 10", len(cases))
	}
	for _, in := range cases {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var tc testCase
			if err := yaml.UnmarshalStrict(raw, &tc); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			got := run(t, tc)
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n%s", in, golden, got)
			}
		})
	}
}

func run(t *testing.T, tc testCase) string {
	t.Helper()
	d, err := Decide(&tc.Pod, tc.Namespace)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	if !d.Inject {
		return "not injected: " + d.Reason + "\n"
	}
	ops, err := Patch(&tc.Pod, tc.Namespace, testConfig())
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	patched := apply(t, &tc.Pod, ops)
	// Re-admitting the injected pod changes nothing.
	if again, _ := Decide(patched, tc.Namespace); again.Inject {
		t.Errorf("an injected pod would be injected again: %s", again.Reason)
	}
	out, err := yaml.Marshal(patched)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func apply(t *testing.T, pod *corev1.Pod, ops []Op) *corev1.Pod {
	t.Helper()
	doc, _ := json.Marshal(pod)
	rawOps, _ := json.Marshal(ops)
	p, err := jsonpatch.DecodePatch(rawOps)
	if err != nil {
		t.Fatalf("decoding our patch: %v", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying our patch %s: %v", rawOps, err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(out, &patched); err != nil {
		t.Fatal(err)
	}
	return &patched
}

// TestInjectedPodIsRestricted checks the injected container against the
// Pod Security "restricted" rules that concern it (the cluster test
// proves the real admission accepts it).
func TestInjectedPodIsRestricted(t *testing.T) {
	s, err := parseSettings(nil, DefaultResources())
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig().container(s)
	sc := c.SecurityContext
	switch {
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("capabilities %+v, want drop ALL and nothing added", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccomp is not RuntimeDefault")
	case sc.RunAsUser == nil || *sc.RunAsUser != 2102:
		t.Error("not running as 2102")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.TrustAnchorsPEM = "garbage"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "trust anchors") {
		t.Errorf("Validate with garbage anchors = %v", err)
	}
}
