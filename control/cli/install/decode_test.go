package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

func decodeAll(t *testing.T, out []byte) []object {
	t.Helper()
	var objs []object
	for i, doc := range splitDocuments(out) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// typed returns an empty typed object for a document's apiVersion/kind.
func typed(t *testing.T, doc []byte) runtime.Object {
	t.Helper()
	var tm struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatal(err)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	if gvk == apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
		return &apiextensionsv1.CustomResourceDefinition{}
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		t.Fatalf("no typed struct for %s: %v", gvk, err)
	}
	return obj
}

// TestStrictDecode decodes every rendered document of every golden
// configuration into its typed Kubernetes struct, rejecting unknown and
// duplicate fields.
func TestStrictDecode(t *testing.T) {
	for name, cfg := range goldenCases() {
		for i, doc := range splitDocuments(render(t, cfg)) {
			obj := typed(t, doc)
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s document %d (%T): %v", name, i+1, obj, err)
			}
		}
	}
}

// TestCRDSchemaIsStructural checks what the API server would: the
// schema is structural (every node typed, or int-or-string, or keeping
// unknown fields), and spec keeps unknown fields for the sp-validator
// webhook to refuse by name.
func TestCRDSchemaIsStructural(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CRDsOnly = true
	var crd apiextensionsv1.CustomResourceDefinition
	for _, doc := range bytes.Split(render(t, cfg), []byte("\n---\n")) {
		if bytes.Contains(doc, []byte("name: serviceprofiles.plexus.dev")) {
			if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
				t.Fatal(err)
			}
		}
	}
	if crd.Spec.Group != "plexus.dev" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("CRD spec: %+v", crd.Spec)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(root, &internal, nil); err != nil {
		t.Fatal(err)
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		t.Fatalf("not structural: %v", err)
	}
	for _, e := range structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s) {
		t.Errorf("not structural: %v", e)
	}
	var walk func(p string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(p string, s *apiextensionsv1.JSONSchemaProps) {
		if s.Type == "object" && p != "" && (s.XPreserveUnknownFields == nil || !*s.XPreserveUnknownFields) {
			t.Errorf("schema node %s prunes unknown fields; the webhook would never see them", p)
		}
		for k, v := range s.Properties {
			walk(p+"."+k, &v)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(p+"[]", s.Items.Schema)
		}
	}
	walk("", root)
	route := root.Properties["spec"].Properties["routes"].Items.Schema
	if len(route.Required) != 1 || route.Required[0] != "name" {
		t.Errorf("route required = %v, want [name]", route.Required)
	}
}

// TestGenerateIdentity checks real key material: the issuer chains to the
// anchor, its key matches, and the rendered Secret carries it.
func TestGenerateIdentity(t *testing.T) {
	now := time.Now()
	id, err := GenerateIdentity("mesh.example.org", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyIdentity(id, "mesh.example.org", now); err != nil {
		t.Fatalf("generated issuer does not verify: %v", err)
	}
	// It signs its own trust domain's identities only.
	for _, td := range []string{"cluster.local", "b.mesh.example.org", "example.org"} {
		if err := VerifyIdentity(id, td, now); err == nil || !strings.Contains(err.Error(), "not of "+td) {
			t.Errorf("the issuer for mesh.example.org accepted for %s: %v", td, err)
		}
	}
	anchors, _ := pki.ParseCerts(id.AnchorsPEM)
	issuer, _ := pki.ParseCerts(id.IssuerCertPEM)
	if len(anchors) != 1 || !anchors[0].IsCA || anchors[0].CheckSignatureFrom(anchors[0]) != nil {
		t.Errorf("anchor is not one self-signed CA: %d certificates", len(anchors))
	}
	if !issuer[0].IsCA || issuer[0].CheckSignatureFrom(anchors[0]) != nil || !issuer[0].MaxPathLenZero {
		t.Errorf("issuer is not an intermediate CA signed by the anchor")
	}
	if !strings.Contains(issuer[0].Subject.CommonName, "mesh.example.org") {
		t.Errorf("issuer subject %q does not name the trust domain", issuer[0].Subject.CommonName)
	}
	// Another anchor's issuer does not verify.
	other, err := GenerateIdentity("mesh.example.org", now)
	if err != nil {
		t.Fatal(err)
	}
	mixed := Identity{AnchorsPEM: other.AnchorsPEM, IssuerCertPEM: id.IssuerCertPEM, IssuerKeyPEM: id.IssuerKeyPEM}
	if err := VerifyIdentity(mixed, "mesh.example.org", now); err == nil {
		t.Error("an issuer verified against another anchor")
	}
}

// TestIdentityFiles renders the issuer from files, and refuses files that
// do not chain.
func TestIdentityFiles(t *testing.T) {
	now := time.Now()
	id, err := GenerateIdentity("cluster.local", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateIdentity("cluster.local", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := DefaultConfig()
	cfg.TrustAnchorsFile = write("ca.crt", id.AnchorsPEM)
	cfg.IssuerCertificateFile = write("issuer.crt", id.IssuerCertPEM)
	cfg.IssuerKeyFile = write("issuer.key", id.IssuerKeyPEM)
	r := testRenderer()
	r.Now = func() time.Time { return now }
	r.Generate = func(string, time.Time) (Identity, error) {
		t.Fatal("generated an issuer although files were given")
		return Identity{}, nil
	}
	var out bytes.Buffer
	if err := r.Render(cfg, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("ca-bundle.crt: |\n    "+strings.SplitN(string(id.AnchorsPEM), "\n", 2)[0])) {
		t.Errorf("the anchors ConfigMap does not hold the given anchors:\n%s", out.String())
	}
	cfg.TrustAnchorsFile = write("other.crt", other.AnchorsPEM)
	err = r.Render(cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "does not verify") || !strings.Contains(err.Error(), "other.crt") {
		t.Errorf("issuer of another anchor: got %v, want a verification error naming the files", err)
	}
	cfg.TrustAnchorsFile = filepath.Join(dir, "missing.crt")
	if err := r.Render(cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("missing file: got %v", err)
	}
}
