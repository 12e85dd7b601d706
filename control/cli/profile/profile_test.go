package profile

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func render(t *testing.T, p Params) string {
	t.Helper()
	var b bytes.Buffer
	if err := Template(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// decode reads a profile strictly into control/serviceprofile's types and
// validates it.
func decode(t *testing.T, text, clusterDomain string) *serviceprofile.ServiceProfile {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := serviceprofile.Decode(j)
	if err != nil {
		t.Fatalf("strict decode: %v\n%s", err, text)
	}
	if err := sp.Validate(clusterDomain); err != nil {
		t.Fatalf("validate: %v\n%s", err, text)
	}
	return sp
}

func TestTemplate(t *testing.T) {
	p := Params{Service: "books", Namespace: "shop", ClusterDomain: "cluster.local"}
	out := render(t, p)
	golden := filepath.Join("testdata", "books.shop.yaml")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, out)
	}
	sp := decode(t, out, p.ClusterDomain)
	if sp.APIVersion != serviceprofile.APIVersion || sp.Kind != serviceprofile.Kind || sp.Name != "books.shop.svc.cluster.local" || sp.Namespace != "shop" {
		t.Errorf("object: %s %s %s/%s", sp.APIVersion, sp.Kind, sp.Namespace, sp.Name)
	}
	r := sp.Spec.Routes
	if len(r) != 2 || r[0].Condition.Method != "GET" || len(r[0].ResponseClasses) != 1 || !r[0].IsRetryable || r[0].Timeout != "300ms" ||
		len(r[1].Condition.All) != 2 || sp.Spec.RetryBudget == nil || sp.Spec.RetryBudget.TTL != "10s" || sp.Spec.DstOverrides != nil {
		t.Errorf("spec: %+v", sp.Spec)
	}
}

// TestDstOverridesUncommented: removing the comment marks of the traffic
// split gives a valid profile with two weighted authorities.
func TestDstOverridesUncommented(t *testing.T) {
	p := Params{Service: "web", Namespace: "default", ClusterDomain: "k8s.example.org"}
	out := render(t, p)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "  # "); ok && (strings.HasPrefix(rest, "dstOverrides:") || strings.HasPrefix(rest, "- ") || strings.HasPrefix(rest, "  weight:")) {
			l = "  " + rest
		}
		lines = append(lines, l)
	}
	sp := decode(t, strings.Join(lines, "\n"), p.ClusterDomain)
	d := sp.Spec.DstOverrides
	if len(d) != 2 || d[0].Authority != "web.default.svc.k8s.example.org:80" || d[1].Authority != "web-canary.default.svc.k8s.example.org:80" || d[1].Weight.String() != "100m" {
		t.Errorf("dstOverrides: %+v", d)
	}
}

func TestBadNames(t *testing.T) {
	for _, p := range []Params{
		{Service: "Books", Namespace: "shop", ClusterDomain: "cluster.local"},
		{Service: "books", Namespace: "a.b", ClusterDomain: "cluster.local"},
		{Service: "books", Namespace: "shop", ClusterDomain: ""},
		{Service: "", Namespace: "shop", ClusterDomain: "cluster.local"},
	} {
		var b bytes.Buffer
		if err := Template(&b, p); err == nil || b.Len() != 0 {
			t.Errorf("%+v: error %v, %d bytes written", p, err, b.Len())
		}
	}
}
