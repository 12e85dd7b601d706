package policyv1alpha1

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// sample reads testdata/<name>.yaml as a dynamic informer would hold it.
func sample(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return u
}

func meta(name, ns string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: APIVersion, Kind: kind}
}

// samples are testdata's objects as Decode must read them.
func samples() map[string]any {
	return map[string]any{
		"server": &Server{TypeMeta: typeMeta(ServerKind), ObjectMeta: meta("web-http", "shop"), Spec: ServerSpec{
			PodSelector: metav1.LabelSelector{
				MatchLabels:      map[string]string{"app": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "track", Operator: metav1.LabelSelectorOpIn, Values: []string{"stable", "canary"}}},
			},
			Port:          intstr.FromString("http"),
			ProxyProtocol: ProtocolHTTP1,
			AccessPolicy:  AllAuthenticated,
		}},
		"authorizationpolicy": &AuthorizationPolicy{TypeMeta: typeMeta(AuthorizationPolicyKind), ObjectMeta: meta("web-from-frontend", "shop"), Spec: AuthorizationPolicySpec{
			TargetRef: TargetRef{Group: Group, Kind: ServerKind, Name: "web-http"},
			RequiredAuthenticationRefs: []NamespacedTargetRef{
				{Group: Group, Kind: MeshTLSAuthenticationKind, Name: "frontend"},
				{Group: Group, Kind: NetworkAuthenticationKind, Name: "cluster-network", Namespace: "plexus-system"},
			},
		}},
		"meshtlsauthentication": &MeshTLSAuthentication{TypeMeta: typeMeta(MeshTLSAuthenticationKind), ObjectMeta: meta("frontend", "shop"), Spec: MeshTLSAuthenticationSpec{
			IdentityRefs: []IdentityRef{
				{Kind: ServiceAccountKind, Name: "frontend"},
				{Kind: ServiceAccountKind, Name: "checkout", Namespace: "payments"},
				{Kind: NamespaceKind, Name: "edge"},
			},
		}},
		"networkauthentication": &NetworkAuthentication{TypeMeta: typeMeta(NetworkAuthenticationKind), ObjectMeta: meta("cluster-network", "plexus-system"), Spec: NetworkAuthenticationSpec{
			Networks: []Network{
				{CIDR: "10.0.0.0/8", Except: []string{"10.96.0.0/12", "10.0.0.1"}},
				{CIDR: "fd00::/8"},
				{CIDR: "192.168.1.10"},
			},
		}},
		"httplocalratelimitpolicy": &HTTPLocalRateLimitPolicy{TypeMeta: typeMeta(HTTPLocalRateLimitPolicyKind), ObjectMeta: meta("web-http", "shop"), Spec: HTTPLocalRateLimitPolicySpec{
			TargetRef: TargetRef{Group: Group, Kind: ServerKind, Name: "web-http"},
			Total:     &Limit{RequestsPerSecond: 1000},
			Identity:  &Limit{RequestsPerSecond: 100},
			Overrides: []Override{{RequestsPerSecond: 500, ClientRefs: []IdentityRef{
				{Kind: ServiceAccountKind, Name: "batch"},
				{Kind: ServiceAccountKind, Name: "reports", Namespace: "analytics"},
			}}},
		}},
	}
}

func TestDecodeSamples(t *testing.T) {
	for name, want := range samples() {
		t.Run(name, func(t *testing.T) {
			got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
			if err := Decode(sample(t, name), got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestDecodeNumericPort(t *testing.T) {
	u := sample(t, "server")
	if err := unstructured.SetNestedField(u.Object, int64(8080), "spec", "port"); err != nil {
		t.Fatal(err)
	}
	var s Server
	if err := Decode(u, &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Port != intstr.FromInt32(8080) {
		t.Errorf("port = %#v, want the number 8080", s.Spec.Port)
	}
}

func TestDecodeRefusesUnknownAndMistypedFields(t *testing.T) {
	for _, tc := range []struct {
		name, sample string
		set          any
		path         []string
		want         []string
	}{
		{"unknown field", "authorizationpolicy", "x", []string{"spec", "mode"}, []string{"AuthorizationPolicy", `unknown field "spec.mode"`}},
		{"unknown nested field", "httplocalratelimitpolicy", int64(5), []string{"spec", "total", "burst"}, []string{`unknown field "spec.total.burst"`}},
		{"wrong type", "networkauthentication", int64(5), []string{"spec", "networks"}, []string{"NetworkAuthentication plexus-system/cluster-network"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := sample(t, tc.sample)
			if err := unstructured.SetNestedField(u.Object, tc.set, tc.path...); err != nil {
				t.Fatal(err)
			}
			into := reflect.New(reflect.TypeOf(samples()[tc.sample]).Elem()).Interface()
			err := Decode(u, into)
			if err == nil {
				t.Fatalf("decoded %+v", into)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A Server with a field this version does not know still decodes: it
// keeps applying by what is known instead of falling back to the default
// policy.
func TestDecodeServerKeepsUnknownFieldsOut(t *testing.T) {
	u := sample(t, "server")
	if err := unstructured.SetNestedField(u.Object, "x", "spec", "futureField"); err != nil {
		t.Fatal(err)
	}
	var srv Server
	if err := Decode(u, &srv); err != nil || srv.Spec.Port.StrVal != "http" {
		t.Errorf("Decode = %v (port %v), want the Server with what this version knows", err, srv.Spec.Port)
	}
}

func TestIsKind(t *testing.T) {
	for _, tc := range []struct {
		ref         TargetRef
		group, kind string
		want        bool
	}{
		{TargetRef{Group: Group, Kind: ServerKind}, Group, ServerKind, true},
		{TargetRef{Kind: ServerKind}, Group, ServerKind, false},
		{TargetRef{Group: Group, Kind: "server"}, Group, ServerKind, false},
		{TargetRef{Kind: NamespaceKind}, "", NamespaceKind, true},
		{TargetRef{Kind: NamespaceKind}, "core", NamespaceKind, true},
		{TargetRef{Group: "core", Kind: NamespaceKind}, "", NamespaceKind, true},
		{TargetRef{Group: GatewayGroup, Kind: HTTPRouteKind}, GatewayGroup, GRPCRouteKind, false},
	} {
		if got := tc.ref.IsKind(tc.group, tc.kind); got != tc.want {
			t.Errorf("%+v.IsKind(%q, %q) = %v, want %v", tc.ref, tc.group, tc.kind, got, tc.want)
		}
		n := NamespacedTargetRef{Group: tc.ref.Group, Kind: tc.ref.Kind, Name: tc.ref.Name, Namespace: "other"}
		if got := n.IsKind(tc.group, tc.kind); got != tc.want {
			t.Errorf("%+v.IsKind(%q, %q) = %v, want %v", n, tc.group, tc.kind, got, tc.want)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":   "10.0.0.0/8",
		"10.1.2.3/8":   "10.0.0.0/8",
		"192.168.1.10": "192.168.1.10/32",
		"fd00::/8":     "fd00::/8",
		"fd00::1":      "fd00::1/128",
		"0.0.0.0/0":    "0.0.0.0/0",
	} {
		got, err := ParsePrefix(in)
		if err != nil || got != netip.MustParsePrefix(want) {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "10.0.0.256", "010.0.0.1", "fe80::1%eth0", "::ffff:10.0.0.1", "::ffff:10.0.0.0/104", "example.org"} {
		if got, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), in) {
			t.Errorf("ParsePrefix(%q): error %q does not name the value", in, err)
		}
	}
}
