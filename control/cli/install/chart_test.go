package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/viz/cli"
)

// chartsDir is deploy/charts from this package.
const chartsDir = "../../../deploy/charts"

// TestChartsUpToDate: the charts in deploy/charts are what Charts
// generates now; `make charts` rewrites them.
func TestChartsUpToDate(t *testing.T) {
	files, err := Renderer{Manifests: deploy.Manifests}.Charts()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(chartsDir, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("deploy/charts/%s is not what deploy/ generates (run make charts)", p)
		}
	}
	onDisk, err := filepath.Glob(filepath.Join(chartsDir, "*", "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range onDisk {
		rel, _ := filepath.Rel(chartsDir, f)
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			t.Errorf("deploy/charts/%s is not generated any more (run make charts)", rel)
		}
	}
}

// TestMergeLines: a change's lines go under the condition, with the
// plain lines under else, and earlier conditions in the base are kept.
func TestMergeLines(t *testing.T) {
	base := []byte("a\n{{- if X }}\nx\n{{- end }}\nb\nc\n")
	plain := []byte("a\nb\nc\n")
	changed := []byte("a\nB\nc\nd\n")
	got := string(mergeLines("Y", base, plain, changed))
	want := "a\n{{- if X }}\nx\n{{- end }}\n{{- if Y }}\nB\n{{- else }}\nb\n{{- end }}\nc\n{{- if Y }}\nd\n{{- end }}\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// helmBinary returns integration/cluster/deps.sh helm's binary. Without
// it the test is skipped, except in CI, where make test has built it.
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", `source ../../../integration/cluster/env.sh && echo "$HELM_BIN"`).Output()
	if err != nil {
		t.Fatalf("reading HELM_BIN from integration/cluster/env.sh: %v", err)
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		msg := "helm is not built (" + path + "): run integration/cluster/deps.sh helm"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// helm runs the helm binary with its state in a temporary directory.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &helmError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// helmTemplate renders chart with values (a values file's content).
func helmTemplate(t *testing.T, chart string, values any) ([]byte, error) {
	t.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return helm(t, "template", chart, filepath.Join(chartsDir, chart), "--namespace", Namespace, "--values", file)
}

// chartValues are the values of each chart that match cfg, and id given
// to the control plane.
func chartValues(cfg Config, id Identity) map[string]object {
	image := object{"registry": cfg.ImageRegistry, "tag": cfg.Version}
	return map[string]object{
		ChartCRDs: {"nodeImageMode": cfg.NodeImageMode},
		ChartControlPlane: {
			"image": image,
			"identity": object{
				"trustDomain":     cfg.TrustDomain,
				"trustAnchorsPEM": string(id.AnchorsPEM),
				"issuer":          object{"tls": object{"crtPEM": string(id.IssuerCertPEM), "keyPEM": string(id.IssuerKeyPEM)}},
			},
			"clusterDomain":   cfg.ClusterDomain,
			"clusterNetworks": cfg.ClusterNetworks,
			"proxy":           object{"defaultInboundPolicy": cfg.DefaultInboundPolicy},
			"ha":              object{"enabled": cfg.HA},
		},
		ChartNode: {"image": image, "cni": object{"binDir": cfg.CNIBinDir, "confDir": cfg.CNIConfDir}},
	}
}

// byName indexes objects by apiVersion, kind, namespace and name.
func byName(t *testing.T, out []byte) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range decodeAll(t, out) {
		if len(o) == 0 {
			continue
		}
		keptOnUninstall(t, o)
		// What Helm renders is Helm's, what install renders install's.
		if meta, _ := o["metadata"].(object); meta != nil {
			if labels, _ := meta["labels"].(object); labels[ManagedBy] == "Helm" {
				labels[ManagedBy] = ManagedByInstall
			}
		}
		k := str(o["apiVersion"]) + " " + describe(o)
		if _, dup := m[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		m[k] = o
	}
	return m
}

// keptOnUninstall checks that a chart's Gateway API CRD carries
// HelmResourcePolicy keep, and removes it, the one way the charts'
// objects may differ from install's.
func keptOnUninstall(t *testing.T, o object) {
	t.Helper()
	meta, _ := o["metadata"].(object)
	ann, _ := meta["annotations"].(object)
	spec, _ := o["spec"].(object)
	gateway := kind(o) == "CustomResourceDefinition" && spec["group"] == "gateway.networking.k8s.io"
	if _, ok := ann[HelmResourcePolicy]; !ok {
		return
	}
	identityObject := (kind(o) == "Secret" || kind(o) == "ConfigMap") && str(meta["namespace"]) == Namespace && strings.HasPrefix(str(meta["name"]), "plexus-identity-")
	if !(gateway || identityObject) || ann[HelmResourcePolicy] != "keep" {
		t.Errorf("%s has %s=%v", describe(o), HelmResourcePolicy, ann[HelmResourcePolicy])
	}
	delete(ann, HelmResourcePolicy)
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
}

func sameObjects(t *testing.T, what string, got, want map[string]object) {
	t.Helper()
	var names []string
	for k := range want {
		names = append(names, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		g, ok1 := got[k]
		w, ok2 := want[k]
		switch {
		case !ok1:
			t.Errorf("%s: %s is missing", what, k)
		case !ok2:
			t.Errorf("%s: %s is extra", what, k)
		case !reflect.DeepEqual(g, w):
			gb, _ := yaml.Marshal(g)
			wb, _ := yaml.Marshal(w)
			t.Errorf("%s: %s differs; chart:\n%s\ninstall:\n%s", what, k, gb, wb)
		}
	}
}

// TestChartsRenderWhatInstallRenders: for each configuration, real helm
// renders from the charts, with the matching values, exactly the objects
// `plexusctl install` renders (the identity given to both).
func TestChartsRenderWhatInstallRenders(t *testing.T) {
	helmBinary(t)
	id := realIdentity(t)
	r := testRenderer()
	for name, cfg := range goldenCases() {
		if cfg.CRDsOnly {
			continue
		}
		custom := cfg
		if name == "custom" {
			custom.DefaultInboundPolicy = "deny"
			custom.ClusterNetworks = "10.244.0.0/16,10.96.0.0/12"
		}
		t.Run(name, func(t *testing.T) {
			cfg := custom
			cfg.TrustAnchorsFile, cfg.IssuerCertificateFile, cfg.IssuerKeyFile = id.files(t)
			var out bytes.Buffer
			if err := r.Render(cfg, &out); err != nil {
				t.Fatal(err)
			}
			want := byName(t, out.Bytes())
			vals := chartValues(cfg, id.Identity)
			charts := []string{ChartCRDs, ChartControlPlane, ChartNode}
			if cfg.NodeImageMode {
				charts = charts[:2]
			}
			var all []byte
			for _, c := range charts {
				b, err := helmTemplate(t, c, vals[c])
				if err != nil {
					t.Fatalf("helm template %s: %v", c, err)
				}
				all = append(append(all, b...), "\n---\n"...)
			}
			sameObjects(t, name, byName(t, all), want)
		})
	}
}

// TestVizChartRendersWhatVizInstallRenders: the viz chart's defaults are
// `plexusctl viz install`.
func TestVizChartRendersWhatVizInstallRenders(t *testing.T) {
	helmBinary(t)
	var out bytes.Buffer
	if err := (vizcli.Renderer{Manifests: deploy.Manifests}).Install(&out); err != nil {
		t.Fatal(err)
	}
	got, err := helmTemplate(t, ChartViz, object{})
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, "viz", byName(t, got), byName(t, out.Bytes()))
}

// TestChartGeneratesIssuerWithoutIdentityValues: with no identity values,
// no issuer is rendered (a random one in a chart would change on every
// upgrade); identity makes it once and may create it, nothing more.
func TestChartGeneratesIssuerWithoutIdentityValues(t *testing.T) {
	out, err := helmTemplate(t, ChartControlPlane, object{})
	if err != nil {
		t.Fatal(err)
	}
	objs := byName(t, out)
	for _, k := range []string{"v1 Secret plexus-system/plexus-identity-issuer", "v1 ConfigMap plexus-system/plexus-identity-trust-anchors"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered without identity values", k)
		}
	}
	role, ok := objs["rbac.authorization.k8s.io/v1 Role plexus-system/plexus-identity-generate-issuer"]
	if !ok {
		t.Fatal("no Role lets identity create the issuer")
	}
	// create (which cannot be limited to a name), then get and update of
	// the anchors ConfigMap alone; never delete, list or Secrets by name.
	b, _ := yaml.Marshal(role["rules"])
	want := `- apiGroups:
  - ""
  resources:
  - secrets
  - configmaps
  verbs:
  - create
- apiGroups:
  - ""
  resourceNames:
  - plexus-identity-trust-anchors
  resources:
  - configmaps
  verbs:
  - get
  - update
`
	if string(b) != want {
		t.Errorf("the generation Role grants:\n%s\nwant:\n%s", b, want)
	}
	d := objs["apps/v1 Deployment plexus-system/plexus-identity"]
	db, _ := yaml.Marshal(d)
	if !strings.Contains(string(db), GenerateIssuerFlag) {
		t.Errorf("identity runs without %s:\n%s", GenerateIssuerFlag, db)
	}

	// With them, neither the flag nor the Role.
	id := realIdentity(t)
	out, err = helmTemplate(t, ChartControlPlane, chartValues(DefaultConfig(), id.Identity)[ChartControlPlane])
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(GenerateIssuerFlag)) || bytes.Contains(out, []byte("plexus-identity-generate-issuer")) {
		t.Error("identity generates an issuer although one was given")
	}
}

// TestChartValuesRejected: bad values fail the render naming the key.
func TestChartValuesRejected(t *testing.T) {
	helmBinary(t)
	for _, c := range []struct {
		chart  string
		values object
		want   string
	}{
		{ChartControlPlane, object{"ha": object{"enabled": "yes"}}, "/ha/enabled"},
		{ChartControlPlane, object{"identity": object{"trustDomian": "x"}}, "trustDomian"},
		{ChartControlPlane, object{"proxy": object{"defaultInboundPolicy": "allow"}}, "/proxy/defaultInboundPolicy"},
		{ChartControlPlane, object{"identity": object{"trustDomain": "Mesh.Example"}}, "/identity/trustDomain"},
		{ChartControlPlane, object{"identity": object{"resources": object{"limits": object{"gpu": 1}}}}, "/identity/resources/limits"},
		{ChartControlPlane, object{"identity": object{"issuer": object{"tls": object{"crtPEM": "-----BEGIN CERTIFICATE-----\n"}}}}, "identity.trustAnchorsPEM is empty"},
		{ChartControlPlane, object{"identity": object{"trustAnchorsPEM": "-----BEGIN CERTIFICATE-----\n"}}, "identity.issuer.tls.crtPEM"},
		{ChartNode, object{"cni": object{"binDir": "opt/cni/bin"}}, "/cni/binDir"},
		{ChartNode, object{"cni": object{"confDir": "/etc/cni/net.d/.."}}, "/cni/confDir"},
		{ChartNode, object{"cni": object{"binDir": "/opt//cni"}}, "/cni/binDir"},
		{ChartNode, object{"cni": object{"binDir": "/opt/./cni"}}, "/cni/binDir"},
		{ChartNode, object{"image": object{"registry": "&x"}}, "/image/registry"},
		{ChartControlPlane, object{"clusterNetworks": "10.0.0.0"}, "/clusterNetworks"},
		{ChartNode, object{"image": object{"tag": 3}}, "/image/tag"},
		{ChartCRDs, object{"gatewayAPI": object{"install": true}}, "'install' not allowed"},
		{ChartViz, object{"clusterDomain": ""}, "/clusterDomain"},
	} {
		_, err := helmTemplate(t, c.chart, c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %v: %v, want an error naming %q", c.chart, c.values, err, c.want)
		}
	}
}

// TestChartsLint: helm lint --strict passes every chart.
func TestChartsLint(t *testing.T) {
	helmBinary(t)
	for _, c := range []string{ChartCRDs, ChartControlPlane, ChartNode, ChartViz} {
		if out, err := helm(t, "lint", "--strict", filepath.Join(chartsDir, c)); err != nil {
			t.Errorf("helm lint %s: %v\n%s", c, err, out)
		}
	}
}

// givenIdentity is a real trust anchor and issuer, also as files.
type givenIdentity struct {
	Identity
	dir string
}

// realIdentity's issuer has no name constraints, as one made with
// another tool (step, cert-manager) may not: it suits any trust domain.
func realIdentity(t *testing.T) givenIdentity {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: "cluster.local", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.EncodeKey(issuer.Key)
	if err != nil {
		t.Fatal(err)
	}
	return givenIdentity{Identity: Identity{AnchorsPEM: pki.EncodeCerts(anchor.Cert), IssuerCertPEM: pki.EncodeCerts(issuer.Cert), IssuerKeyPEM: key}, dir: t.TempDir()}
}

func (g givenIdentity) files(t *testing.T) (anchors, cert, key string) {
	t.Helper()
	anchors, cert, key = filepath.Join(g.dir, "ca.crt"), filepath.Join(g.dir, "issuer.crt"), filepath.Join(g.dir, "issuer.key")
	for f, b := range map[string][]byte{anchors: g.AnchorsPEM, cert: g.IssuerCertPEM, key: g.IssuerKeyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return anchors, cert, key
}
