package outboundpolicy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testCase is the first document of a testdata/*.yaml file; the others
// are Services, HTTPRoutes, GRPCRoutes and ServiceProfiles.
type testCase struct {
	Kind string `json:"kind"` // Case
	// Service "namespace/name" and Port are the parent asked for.
	Service         string `json:"service"`
	Port            int32  `json:"port"`
	ClientNamespace string `json:"clientNamespace,omitempty"`
	ClusterDomain   string `json:"clusterDomain,omitempty"`
}

type fixture struct {
	tc       testCase
	services map[string]*corev1.Service
	http     []*gatewayv1.HTTPRoute
	grpc     []*gatewayv1.GRPCRoute
	profiles []*serviceprofile.ServiceProfile
}

// TestGolden translates every testdata/*.yaml case and compares the
// policy with <case>.json (protojson) and the routes' status and the
// warnings with <case>.status.
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*.yaml")
	if len(cases) < 20 {
		t.Fatalf("found %d cases in testdata, want at least 20", len(cases))
	}
	for _, in := range cases {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			f := readFixture(t, in)
			policy, status := run(t, f)
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", policy)
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".status", status)
		})
	}
}

func compareGolden(t *testing.T, golden, got string) {
	t.Helper()
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
		t.Errorf("differs from %s:\n%s", golden, got)
	}
}

func readFixture(t *testing.T, path string) fixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{services: map[string]*corev1.Service{}}
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var head struct{ APIVersion, Kind string }
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("document %d (%s): %v", i, head.Kind, err)
			}
		}
		switch {
		case i == 0 && head.Kind == "Case":
			strict(&f.tc)
		case head.Kind == "Service":
			var s corev1.Service
			strict(&s)
			f.services[s.Namespace+"/"+s.Name] = &s
		case head.Kind == "HTTPRoute":
			var r gatewayv1.HTTPRoute
			strict(&r)
			f.http = append(f.http, &r)
		case head.Kind == "GRPCRoute":
			var r gatewayv1.GRPCRoute
			strict(&r)
			f.grpc = append(f.grpc, &r)
		case head.Kind == serviceprofile.Kind && head.APIVersion == serviceprofile.APIVersion:
			sp, err := serviceprofile.Decode(js)
			if err != nil {
				t.Fatalf("document %d: %v", i, err)
			}
			f.profiles = append(f.profiles, sp)
		default:
			t.Fatalf("document %d: unexpected %s %s (the first must be kind Case)", i, head.APIVersion, head.Kind)
		}
	}
	if f.tc.Kind != "Case" {
		t.Fatal("no Case document first")
	}
	if f.tc.ClusterDomain == "" {
		f.tc.ClusterDomain = "cluster.local"
	}
	return f
}

func (f fixture) lookup(namespace, name string) (*corev1.Service, bool) {
	s, ok := f.services[namespace+"/"+name]
	return s, ok
}

// profile chooses as the destination server does: the client namespace's
// profile for the Service, else the Service's own.
func (f fixture) profile(svc *corev1.Service) *serviceprofile.ServiceProfile {
	name := fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, f.tc.ClusterDomain)
	for _, ns := range []string{f.tc.ClientNamespace, svc.Namespace} {
		for _, sp := range f.profiles {
			if sp.Namespace == ns && sp.Name == name {
				return sp
			}
		}
	}
	return nil
}

var testNow = metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))

func run(t *testing.T, f fixture) (policyJSON, status string) {
	t.Helper()
	svc, ok := f.services[f.tc.Service]
	if !ok {
		t.Fatalf("Case service %q is not among the Services", f.tc.Service)
	}
	var notes []string
	in := Input{
		ClusterDomain: f.tc.ClusterDomain, ClientNamespace: f.tc.ClientNamespace,
		Service: svc, Port: f.tc.Port,
		HTTPRoutes: f.http, GRPCRoutes: f.grpc, Profile: f.profile(svc),
		Services: f.lookup,
		Warn: func(err error) {
			for _, line := range strings.Split(err.Error(), "\n") {
				notes = append(notes, "warn: "+line)
			}
		},
	}
	policy := Translate(in)
	in.Warn = nil
	again := Translate(in)
	if !proto.Equal(policy, again) {
		t.Error("two translations of the same input differ")
	}
	for _, r := range f.http {
		notes = append(notes, statusLines(kindHTTPRoute, &r.ObjectMeta, HTTPRouteParents(r, f.lookup, testNow))...)
	}
	for _, r := range f.grpc {
		notes = append(notes, statusLines(kindGRPCRoute, &r.ObjectMeta, GRPCRouteParents(r, f.lookup, testNow))...)
	}
	slices.Sort(notes)
	return marshal(t, policy), strings.Join(notes, "\n") + "\n"
}

func statusLines(kind string, meta *metav1.ObjectMeta, parents []gatewayv1.RouteParentStatus) []string {
	if len(parents) == 0 {
		return []string{fmt.Sprintf("%s %s/%s: no Service parent", kind, meta.Namespace, meta.Name)}
	}
	var out []string
	for _, p := range parents {
		port := "any port"
		if p.ParentRef.Port != nil {
			port = fmt.Sprintf("port %d", *p.ParentRef.Port)
		}
		line := fmt.Sprintf("%s %s/%s -> Service %s %s:", kind, meta.Namespace, meta.Name, p.ParentRef.Name, port)
		for _, c := range p.Conditions {
			line += fmt.Sprintf(" %s=%s/%s", c.Type, c.Status, c.Reason)
			if c.Message != "" {
				line += fmt.Sprintf(" %q", c.Message)
			}
		}
		out = append(out, line)
	}
	return out
}

// marshal is protojson made stable: protojson varies its whitespace on
// purpose, so it is compacted and indented again.
func marshal(t *testing.T, m *destinationpb.OutboundPolicy) string {
	t.Helper()
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.String() + "\n"
}
