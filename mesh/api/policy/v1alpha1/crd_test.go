package policyv1alpha1

import (
	"io/fs"
	"maps"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
)

// kinds maps each kind to its resource and Go type.
var kinds = map[string]struct {
	resource schema.GroupVersionResource
	typ      reflect.Type
}{
	ServerKind:                   {ServerResource, reflect.TypeFor[Server]()},
	AuthorizationPolicyKind:      {AuthorizationPolicyResource, reflect.TypeFor[AuthorizationPolicy]()},
	MeshTLSAuthenticationKind:    {MeshTLSAuthenticationResource, reflect.TypeFor[MeshTLSAuthentication]()},
	NetworkAuthenticationKind:    {NetworkAuthenticationResource, reflect.TypeFor[NetworkAuthentication]()},
	HTTPLocalRateLimitPolicyKind: {HTTPLocalRateLimitPolicyResource, reflect.TypeFor[HTTPLocalRateLimitPolicy]()},
}

// crdFile is one deploy/crds/policy-*.yaml.
type crdFile struct {
	name string // in deploy/crds
	raw  []byte
	crd  *apiextensionsv1.CustomResourceDefinition
}

// loadCRDs reads the policy CRDs as deploy embeds them, by kind.
func loadCRDs(t *testing.T) map[string]crdFile {
	t.Helper()
	files, err := fs.Glob(deploy.Manifests, "crds/policy-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]crdFile{}
	for _, f := range files {
		raw, err := fs.ReadFile(deploy.Manifests, f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		kind := crd.Spec.Names.Kind
		if _, dup := crds[kind]; dup {
			t.Fatalf("%s: a second CRD of kind %s", f, kind)
		}
		crds[kind] = crdFile{name: path.Base(f), raw: raw, crd: &crd}
	}
	return crds
}

// schemaOf is the CRD's only version's schema.
func schemaOf(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// TestCRDs checks what the API server would check of a CRD short of
// compiling its CEL rules (TestCRDsAgainstAPIServer does that): names,
// one served version, a structural schema that prunes unknown fields; and
// that deploy/crds/kustomization.yaml lists every file.
func TestCRDs(t *testing.T) {
	crds := loadCRDs(t)
	if len(crds) != len(kinds) {
		t.Errorf("deploy/crds/policy-*.yaml define %d kinds, want the %d of this package", len(crds), len(kinds))
	}
	kustomization, err := fs.ReadFile(deploy.Manifests, "crds/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for kind, k := range kinds {
		f, ok := crds[kind]
		if !ok {
			t.Errorf("no CRD of kind %s", kind)
			continue
		}
		spec := f.crd.Spec
		if want := "policy-" + strings.ToLower(kind) + ".yaml"; f.name != want {
			t.Errorf("%s is in %s, want %s", kind, f.name, want)
		}
		if !strings.Contains(string(kustomization), "- "+f.name+"\n") {
			t.Errorf("deploy/crds/kustomization.yaml does not list %s", f.name)
		}
		if spec.Group != Group || spec.Names.Plural != k.resource.Resource || f.crd.Name != k.resource.Resource+"."+Group ||
			spec.Names.ListKind != kind+"List" || spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s: names %s %+v scope %s, want %s.%s, namespaced", f.name, f.crd.Name, spec.Names, spec.Scope, k.resource.Resource, Group)
		}
		if len(spec.Versions) != 1 || spec.Versions[0].Name != GroupVersion.Version || !spec.Versions[0].Served || !spec.Versions[0].Storage {
			t.Fatalf("%s: want one served, stored version %s", f.name, GroupVersion.Version)
		}
		root := schemaOf(f.crd)
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(root, &internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Errorf("%s: not structural: %v", f.name, err)
			continue
		}
		for _, e := range structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s) {
			t.Errorf("%s: not structural: %v", f.name, e)
		}
		walk("", root, func(p string, s *apiextensionsv1.JSONSchemaProps) {
			if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
				t.Errorf("%s: %s keeps unknown fields; they should be pruned", f.name, p)
			}
		})
	}
}

// walk calls fn for every node of a schema, with its path as the API
// server writes it (spec.networks[].cidr; map values as .*).
func walk(p string, s *apiextensionsv1.JSONSchemaProps, fn func(p string, s *apiextensionsv1.JSONSchemaProps)) {
	fn(p, s)
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		v := s.Properties[name]
		walk(strings.TrimPrefix(p+"."+name, "."), &v, fn)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(p+"[]", s.Items.Schema, fn)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walk(p+".*", s.AdditionalProperties.Schema, fn)
	}
}

// TestRuleMessagesNameTheirField: the API server prefixes a CEL error
// with the path, but kubectl users read the message first.
func TestRuleMessagesNameTheirField(t *testing.T) {
	for _, f := range loadCRDs(t) {
		walk("", schemaOf(f.crd), func(p string, s *apiextensionsv1.JSONSchemaProps) {
			for _, r := range s.XValidations {
				text := r.Message + r.MessageExpression
				if text == "" {
					t.Errorf("%s: rule %q at %s has no message", f.name, r.Rule, p)
					continue
				}
				at := strings.ReplaceAll(p+r.FieldPath, "[]", "")
				last := at[strings.LastIndex(at, ".")+1:]
				if !strings.Contains(text, last+":") && !strings.Contains(text, last+" ") {
					t.Errorf("%s: the message of rule %q at %s does not name %s", f.name, r.Rule, at, last)
				}
			}
		})
	}
}

var index = regexp.MustCompile(`\[\d+\]`)

// TestCasesCoverEveryRule: every CEL rule and every enum of the CRDs has a
// case in crdCases the API server must refuse, naming its path. A case
// counts for the rule at its path whose message it shares the longest run
// of characters with.
func TestCasesCoverEveryRule(t *testing.T) {
	crds := loadCRDs(t)
	for _, c := range crdCases {
		if _, ok := crds[c.kind]; !ok {
			t.Errorf("case %q: no CRD of kind %s", c.name, c.kind)
		}
		if (c.path == "") != (c.msg == "") {
			t.Errorf("case %q: a refused case needs both path and msg", c.name)
		}
	}
	type rule struct{ kind, at, text string }
	var rules []rule
	enums := map[string]bool{} // kind + " " + path
	for kind, f := range crds {
		walk("", schemaOf(f.crd), func(p string, s *apiextensionsv1.JSONSchemaProps) {
			if len(s.Enum) > 0 {
				enums[kind+" "+p] = false
			}
			for _, r := range s.XValidations {
				rules = append(rules, rule{kind, p + r.FieldPath, strings.ReplaceAll(r.Message+r.MessageExpression, `\"`, `"`)})
			}
		})
	}
	covered := make([]bool, len(rules))
	for _, c := range crdCases {
		at := index.ReplaceAllString(c.path, "[]")
		if c.msg == unsupported {
			if _, ok := enums[c.kind+" "+at]; ok {
				enums[c.kind+" "+at] = true
			}
			continue
		}
		best, bestRun := -1, 0
		for i, r := range rules {
			if r.kind == c.kind && r.at == at {
				if n := longestRun(c.msg, r.text); n > bestRun {
					best, bestRun = i, n
				}
			}
		}
		if best >= 0 && bestRun >= 16 {
			covered[best] = true
		}
	}
	for i, r := range rules {
		if !covered[i] {
			t.Errorf("%s: no case breaks the rule at %s with message %s", r.kind, r.at, r.text)
		}
	}
	for e, ok := range enums {
		if !ok {
			t.Errorf("%s: no case refuses a value outside the enum", e)
		}
	}
}

// longestRun is the length of the longest substring of a also in b.
func longestRun(a, b string) int {
	best := 0
	for i := range a {
		for j := i + best + 1; j <= len(a) && strings.Contains(b, a[i:j]); j++ {
			best = j - i
		}
	}
	return best
}

// TestEnumsMatchConstants: the CRD's enums and defaults are this
// package's constants, in order.
func TestEnumsMatchConstants(t *testing.T) {
	spec := schemaOf(loadCRDs(t)[ServerKind].crd).Properties["spec"]
	for _, tc := range []struct {
		field       string
		want        []string
		defaultWant string
	}{
		{"proxyProtocol", strs(ProxyProtocols()), string(ProtocolUnknown)},
		{"accessPolicy", strs(AccessPolicies()), string(DefaultServerAccessPolicy)},
	} {
		s := spec.Properties[tc.field]
		var got []string
		for _, e := range s.Enum {
			var v string
			if err := yaml.Unmarshal(e.Raw, &v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("spec.%s enum %q, want %q", tc.field, got, tc.want)
		}
		if s.Default == nil || string(s.Default.Raw) != `"`+tc.defaultWant+`"` {
			t.Errorf("spec.%s default %v, want %q", tc.field, s.Default, tc.defaultWant)
		}
	}
}

func strs[S ~string](l []S) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = string(s)
	}
	return out
}

// TestTypesMirrorSchemas: every Go field is in the schema and every
// schema property in Go, with the same type; a field is required in the
// schema exactly when its JSON tag lacks omitempty.
func TestTypesMirrorSchemas(t *testing.T) {
	crds := loadCRDs(t)
	for kind, k := range kinds {
		root := schemaOf(crds[kind].crd)
		if !slices.Equal(root.Required, []string{"spec"}) || len(root.Properties) != 1 {
			t.Errorf("%s: the root schema should hold (and require) spec alone", kind)
		}
		specField, _ := k.typ.FieldByName("Spec")
		spec := root.Properties["spec"]
		mirror(t, kind+" spec", specField.Type, &spec)
	}
}

var intOrString = reflect.TypeFor[intstr.IntOrString]()

func mirror(t *testing.T, p string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if typ == intOrString {
		if !s.XIntOrString {
			t.Errorf("%s: Go has an int or string, the schema %q", p, s.Type)
		}
		return
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{reflect.Struct: "object", reflect.Map: "object", reflect.Slice: "array", reflect.String: "string", reflect.Int32: "integer"}[typ.Kind()]
	if want == "" || s.Type != want {
		t.Errorf("%s: Go has %s, the schema %q", p, typ, s.Type)
		return
	}
	switch typ.Kind() {
	case reflect.Int32:
		if s.Format != "int32" {
			t.Errorf("%s: Go has int32, the schema format %q", p, s.Format)
		}
	case reflect.Slice:
		mirror(t, p+"[]", typ.Elem(), s.Items.Schema)
	case reflect.Map:
		mirror(t, p+".*", typ.Elem(), s.AdditionalProperties.Schema)
	case reflect.Struct:
		var goFields, required []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s: field %s has no JSON name", p, f.Name)
				continue
			}
			goFields = append(goFields, name)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s: Go field %s (%s) is not in the schema", p, name, f.Name)
				continue
			}
			mirror(t, p+"."+name, f.Type, &prop)
		}
		for name := range s.Properties {
			if !slices.Contains(goFields, name) {
				t.Errorf("%s: schema property %s is not in Go", p, name)
			}
		}
		sort.Strings(required)
		schemaRequired := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(required, schemaRequired) {
			t.Errorf("%s: Go requires %v (no omitempty), the schema %v", p, required, schemaRequired)
		}
	}
}
