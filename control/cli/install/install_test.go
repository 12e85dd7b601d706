package install

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
)

// fixedNow is the stub clock of the golden tests.
var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// stubIdentity makes the golden output stable: fixed text naming the
// trust domain it was asked for, instead of random keys.
func stubIdentity(trustDomain string, now time.Time) (Identity, error) {
	stamp := trustDomain + " " + now.Format(time.RFC3339)
	return Identity{
		AnchorsPEM:    []byte("stub anchor for " + stamp + "\n"),
		IssuerCertPEM: []byte("stub issuer certificate for " + stamp + "\n"),
		IssuerKeyPEM:  []byte("stub issuer key for " + stamp + "\n"),
	}, nil
}

func testRenderer() Renderer {
	return Renderer{
		Manifests: deploy.Manifests,
		Generate:  stubIdentity,
		Now:       func() time.Time { return fixedNow },
		ReadFile:  os.ReadFile,
	}
}

// goldenCases are the configurations with golden output.
func goldenCases() map[string]Config {
	def := DefaultConfig()
	crds := def
	crds.CRDsOnly = true
	ha := def
	ha.HA = true
	nodeImage := def
	nodeImage.NodeImageMode = true
	custom := def
	custom.TrustDomain = "mesh.example.org"
	custom.ClusterDomain = "k8s.example.org"
	custom.CNIBinDir = "/var/lib/rancher/k3s/data/current/bin"
	custom.CNIConfDir = "/var/lib/rancher/k3s/agent/etc/cni/net.d"
	custom.ImageRegistry = "registry.example.org/mesh"
	custom.Version = "v1.2.3"
	return map[string]Config{
		"default":         def,
		"crds":            crds,
		"ha":              ha,
		"node-image-mode": nodeImage,
		"custom":          custom,
	}
}

func render(t *testing.T, cfg Config) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := testRenderer().Render(cfg, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// abbreviate replaces each Gateway API CRD's spec (thousands of lines of
// upstream schema) with its group, kind and versions, so that the goldens
// stay readable; TestGatewayAPICRDsRenderedVerbatim checks the rest.
func abbreviate(t *testing.T, out []byte) []byte {
	t.Helper()
	docs := splitDocuments(out)
	for i, doc := range docs {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		spec, _ := o["spec"].(object)
		if kind(o) != "CustomResourceDefinition" || spec["group"] != "gateway.networking.k8s.io" {
			continue
		}
		var versions []any
		for _, v := range spec["versions"].([]any) {
			versions = append(versions, str(v.(object)["name"]))
		}
		names, _ := spec["names"].(object)
		o["spec"] = object{"group": spec["group"], "kind": names["kind"], "versions": versions, "elided": "as in deploy/crds/gateway-api"}
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs[i] = b
	}
	return bytes.Join(docs, []byte("---\n"))
}

func TestGolden(t *testing.T) {
	for name, cfg := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			got := abbreviate(t, render(t, cfg))
			goldentest.Golden(t, name+".golden.yaml", got)
		})
	}
}

// kinds lists kind/name of each rendered document, in order.
func kinds(t *testing.T, out []byte) []string {
	t.Helper()
	var list []string
	for _, o := range decodeAll(t, out) {
		list = append(list, describe(o))
	}
	return list
}

func TestOrder(t *testing.T) {
	list := kinds(t, render(t, DefaultConfig()))
	want := []string{
		"Namespace plexus-system",
		"CustomResourceDefinition authorizationpolicies.policy.plexus.dev",
		"CustomResourceDefinition httplocalratelimitpolicies.policy.plexus.dev",
		"CustomResourceDefinition meshtlsauthentications.policy.plexus.dev",
		"CustomResourceDefinition networkauthentications.policy.plexus.dev",
		"CustomResourceDefinition servers.policy.plexus.dev",
		"CustomResourceDefinition serviceprofiles.plexus.dev",
		"CustomResourceDefinition grpcroutes.gateway.networking.k8s.io",
		"CustomResourceDefinition httproutes.gateway.networking.k8s.io",
		"Secret plexus-system/plexus-identity-issuer",
		"ConfigMap plexus-system/plexus-identity-trust-anchors",
	}
	for i, w := range want {
		if i >= len(list) || list[i] != w {
			t.Fatalf("document %d is %q, want %q; all: %v", i+1, at(list, i), w, list)
		}
	}
	// The webhook configurations last, once what serves them exists.
	if last := list[len(list)-2:]; last[0] != "MutatingWebhookConfiguration plexus-injector" || last[1] != "ValidatingWebhookConfiguration plexus-sp-validator" {
		t.Errorf("last documents are %q, want the webhook configurations", last)
	}
	pos := func(prefix string) int {
		for i, k := range list {
			if strings.HasPrefix(k, prefix) {
				return i
			}
		}
		t.Fatalf("no %s in %v", prefix, list)
		return -1
	}
	if !(pos("ClusterRole ") < pos("Service ") && pos("Service ") < pos("Deployment ") && pos("Deployment ") < pos("DaemonSet ")) {
		t.Errorf("want RBAC, Services, Deployments, DaemonSet in that order: %v", list)
	}
}

func at(l []string, i int) string {
	if i < len(l) {
		return l[i]
	}
	return "<none>"
}

func TestNodeImageModeOmitsNodeAgent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeImageMode = true
	for _, k := range kinds(t, render(t, cfg)) {
		if strings.Contains(k, "plexus-node") || strings.Contains(k, "plexus-cni-config") {
			t.Errorf("node-image mode renders %s", k)
		}
	}
	def := strings.Join(kinds(t, render(t, DefaultConfig())), ",")
	if !strings.Contains(def, "DaemonSet plexus-system/plexus-node") {
		t.Errorf("default install has no node agent DaemonSet: %s", def)
	}
}

func TestCRDsOnly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CRDsOnly = true
	list := kinds(t, render(t, cfg))
	want := []string{
		"CustomResourceDefinition authorizationpolicies.policy.plexus.dev",
		"CustomResourceDefinition httplocalratelimitpolicies.policy.plexus.dev",
		"CustomResourceDefinition meshtlsauthentications.policy.plexus.dev",
		"CustomResourceDefinition networkauthentications.policy.plexus.dev",
		"CustomResourceDefinition servers.policy.plexus.dev",
		"CustomResourceDefinition serviceprofiles.plexus.dev",
		"CustomResourceDefinition grpcroutes.gateway.networking.k8s.io",
		"CustomResourceDefinition httproutes.gateway.networking.k8s.io",
	}
	if strings.Join(list, ",") != strings.Join(want, ",") {
		t.Errorf("install --crds renders %v, want only %v", list, want)
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"empty trust domain":     func(c *Config) { c.TrustDomain = "" },
		"uppercase domain":       func(c *Config) { c.ClusterDomain = "Cluster.Local" },
		"relative CNI dir":       func(c *Config) { c.CNIBinDir = "opt/cni/bin" },
		"unclean CNI dir":        func(c *Config) { c.CNIConfDir = "/etc/cni/../net.d" },
		"root CNI dir":           func(c *Config) { c.CNIConfDir = "/" },
		"bad version":            func(c *Config) { c.Version = "v1 2" },
		"registry trailing /":    func(c *Config) { c.ImageRegistry = "example.org/" },
		"partial identity file":  func(c *Config) { c.IssuerKeyFile = "key.pem" },
		"unknown inbound policy": func(c *Config) { c.DefaultInboundPolicy = "allow-all" },
		"bad cluster network":    func(c *Config) { c.ClusterNetworks = "10.0.0.0/8,10.300.0.0/16" },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			mut(&cfg)
			if err := cfg.Validate(); err == nil {
				t.Errorf("Validate accepted %+v", cfg)
			}
			if err := testRenderer().Render(cfg, &bytes.Buffer{}); err == nil {
				t.Error("Render accepted an invalid config")
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}

func TestInventoryNamesWhatRenderWrites(t *testing.T) {
	for name, cfg := range goldenCases() {
		refs, err := testRenderer().Inventory(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.String())
		}
		cfg.SkipGatewayAPICRDs = true // shared: never uninstalled
		want := kinds(t, render(t, cfg))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: inventory\n%s\nrender\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestNodeCleanupFollowsConfig(t *testing.T) {
	cfg := goldenCases()["custom"]
	ds, err := testRenderer().NodeCleanup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{
		"name: plexus-node-cleanup",
		"image: registry.example.org/mesh/plexus-node:v1.2.3",
		"- --cni-bin-dir=/var/lib/rancher/k3s/data/current/bin",
		"- --cni-conf-dir=/var/lib/rancher/k3s/agent/etc/cni/net.d",
		"mountPath: /host/var/lib/rancher/k3s/data/current/bin",
		"path: /var/lib/rancher/k3s/agent/etc/cni/net.d",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup DaemonSet lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/opt/cni/bin") || strings.Contains(out, "plexus.dev/plexus-node") {
		t.Errorf("cleanup DaemonSet keeps a default the config replaces:\n%s", out)
	}
	if _, err := testRenderer().NodeCleanup(Config{}); err == nil {
		t.Error("invalid config accepted")
	}
}
