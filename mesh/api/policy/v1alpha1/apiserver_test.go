package policyv1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// testNamespace exists in every API server.
const testNamespace = "default"

// policyAPI starts a throwaway kube-apiserver (skipping without the
// cached binaries or in -short mode), installs the policy CRDs and waits
// until every kind is served.
func policyAPI(t *testing.T) *rest.Config {
	t.Helper()
	s := apiservertest.Start(t)
	cfg := &rest.Config{Host: s.URL, BearerToken: apiservertest.AdminToken, QPS: -1, // no client-side rate limit
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // self-signed, loopback, test-only
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	for _, f := range loadCRDs(t) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(f.raw, &u.Object); err != nil {
			t.Fatal(err)
		}
		// Creating the CRD compiles its CEL rules and estimates their cost.
		if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Errorf("%s: %v", f.name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	deadline := time.Now().Add(30 * time.Second) // for all the kinds together
	for kind, k := range kinds {
		var err error
		served := eventually.Holds(time.Until(deadline), func() bool {
			// Listing fails until the kind is served.
			_, err = dyn.Resource(k.resource).Namespace(testNamespace).List(ctx, metav1.ListOptions{})
			return err == nil
		})
		if !served {
			t.Fatalf("%s not served after 30s: %v", kind, err)
		}
	}
	return cfg
}

// object builds an object of kind with spec (YAML) in testNamespace.
func object(t *testing.T, kind, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec of %s: %v", name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetAPIVersion(APIVersion)
	u.SetKind(kind)
	u.SetName(name)
	u.SetNamespace(testNamespace)
	return u
}

// TestCRDsAgainstAPIServer runs crdCases, the testdata samples, defaults,
// pruning and printer columns against a real kube-apiserver.
func TestCRDsAgainstAPIServer(t *testing.T) {
	cfg := policyAPI(t)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	t.Run("cases", func(t *testing.T) {
		for i, c := range crdCases {
			t.Run(c.kind+"/"+c.name, func(t *testing.T) {
				u := object(t, c.kind, fmt.Sprintf("case-%d", i), c.spec)
				_, err := dyn.Resource(kinds[c.kind].resource).Namespace(testNamespace).Create(ctx, u, dryRun)
				switch {
				case c.path == "" && err != nil:
					t.Fatalf("refused: %v", err)
				case c.path == "":
				case err == nil:
					t.Fatalf("accepted; want an error at %s containing %q", c.path, c.msg)
				case !apierrors.IsInvalid(err):
					t.Fatalf("want Invalid at %s, got %v", c.path, err)
				default:
					if !causeAt(err, c.path, c.msg) {
						t.Errorf("error lacks %s: ...%s:\n%v", c.path, c.msg, err)
					}
				}
			})
		}
	})

	t.Run("samples", func(t *testing.T) {
		for name := range samples() {
			u := sample(t, name)
			u.SetNamespace(testNamespace)
			res := kinds[u.GetKind()].resource
			got, err := dyn.Resource(res).Namespace(testNamespace).Create(ctx, u, dryRun)
			if err != nil {
				t.Errorf("%s refused: %v", name, err)
				continue
			}
			into := reflect.New(reflect.TypeOf(samples()[name]).Elem())
			if err := Decode(got, into.Interface()); err != nil {
				t.Errorf("%s as the API server returns it: %v", name, err)
				continue
			}
			if spec, want := into.Elem().FieldByName("Spec").Interface(), reflect.ValueOf(samples()[name]).Elem().FieldByName("Spec").Interface(); !reflect.DeepEqual(spec, want) {
				t.Errorf("%s: the API server returns the spec\n%+v\nwant\n%+v", name, spec, want)
			}
		}
	})

	t.Run("defaults", func(t *testing.T) {
		got, err := dyn.Resource(ServerResource).Namespace(testNamespace).Create(ctx, object(t, ServerKind, "defaults", "podSelector: {}\nport: 8080"), dryRun)
		if err != nil {
			t.Fatal(err)
		}
		var s Server
		if err := Decode(got, &s); err != nil {
			t.Fatal(err)
		}
		if s.Spec.ProxyProtocol != ProtocolUnknown || s.Spec.AccessPolicy != DefaultServerAccessPolicy {
			t.Errorf("defaults: proxyProtocol %q, accessPolicy %q; want %q, %q", s.Spec.ProxyProtocol, s.Spec.AccessPolicy, ProtocolUnknown, DefaultServerAccessPolicy)
		}
	})

	t.Run("unknown fields pruned", func(t *testing.T) {
		u := object(t, NetworkAuthenticationKind, "pruned", "networks: [{cidr: 10.0.0.0/8, exclude: [10.1.0.0/16]}]\nfoo: bar")
		got, err := dyn.Resource(NetworkAuthenticationResource).Namespace(testNamespace).Create(ctx, u, dryRun)
		if err != nil {
			t.Fatal(err)
		}
		var na NetworkAuthentication
		if err := Decode(got, &na); err != nil {
			t.Errorf("not pruned: %v", err)
		}
		// kubectl asks for strict field validation: then they are errors.
		strict := dryRun
		strict.FieldValidation = metav1.FieldValidationStrict
		_, err = dyn.Resource(NetworkAuthenticationResource).Namespace(testNamespace).Create(ctx, u, strict)
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.foo"`) || !strings.Contains(err.Error(), `unknown field "spec.networks[0].exclude"`) {
			t.Errorf("strict field validation: got %v, want both unknown fields named", err)
		}
	})

	t.Run("printer columns", func(t *testing.T) {
		crds := loadCRDs(t)
		for name := range samples() {
			u := sample(t, name)
			u.SetNamespace(testNamespace)
			kind := u.GetKind()
			if _, err := dyn.Resource(kinds[kind].resource).Namespace(testNamespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cols, row := table(t, cfg, kinds[kind].resource, u.GetName())
			for _, pc := range crds[kind].crd.Spec.Versions[0].AdditionalPrinterColumns {
				if i := slices.Index(cols, pc.Name); i < 0 {
					t.Errorf("kubectl get %s: no column %s (has %v)", kind, pc.Name, cols)
				} else if row[i] == nil || row[i] == "" {
					t.Errorf("kubectl get %s: column %s (%s) is empty", kind, pc.Name, pc.JSONPath)
				}
			}
			if kind != ServerKind {
				continue
			}
			want := []any{u.GetName(), "http", "HTTP/1", "all-authenticated"}
			if !slices.Equal(cols[:4], []string{"Name", "Port", "Protocol", "Access Policy"}) || !reflect.DeepEqual(row[:4], want) {
				t.Errorf("kubectl get server shows %v: %v, want %v", cols, row, want)
			}
		}
	})
}

// causeAt reports whether err has a cause at path whose message contains msg.
func causeAt(err error, path, msg string) bool {
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == path && strings.Contains(c.Message, msg) {
			return true
		}
	}
	return false
}

// table gets one object of testNamespace as kubectl get prints it: the
// column names and its row.
func table(t *testing.T, cfg *rest.Config, res schema.GroupVersionResource, name string) ([]string, []any) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, cfg.Host+"/apis/"+res.Group+"/"+res.Version+"/namespaces/"+testNamespace+"/"+res.Resource+"/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tab metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&tab); err != nil || resp.StatusCode != http.StatusOK || len(tab.Rows) != 1 {
		t.Fatalf("GET %s as a table: %s, %v, %d rows", req.URL, resp.Status, err, len(tab.Rows))
	}
	var cols []string
	for _, c := range tab.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	return cols, tab.Rows[0].Cells
}
