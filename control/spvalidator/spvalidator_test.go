package spvalidator

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/admissionhttp"
)

func testServer(t *testing.T) (*httptest.Server, *admissionhttp.Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	srv := httptest.NewServer(&Webhook{ClusterDomain: "cluster.local", Metrics: m, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(srv.Close)
	return srv, m
}

// post sends review (JSON) and returns the response of the answer.
func post(t *testing.T, url string, review []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("not an answer: %+v", out)
	}
	return out.Response
}

// review is an AdmissionReview as the API server sends it, for an object
// given as YAML.
func review(t *testing.T, group, version, kind, resource, op, ns, name, objYAML string) []byte {
	t.Helper()
	obj, err := yaml.YAMLToJSON([]byte(objYAML))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{` +
		`"uid":"uid-` + op + `",` +
		`"kind":{"group":"` + group + `","version":"` + version + `","kind":"` + kind + `"},` +
		`"resource":{"group":"` + group + `","version":"` + version + `","resource":"` + resource + `"},` +
		`"name":"` + name + `","namespace":"` + ns + `","operation":"` + op + `",` +
		`"userInfo":{"username":"kubernetes-admin","groups":["system:masters","system:authenticated"]},` +
		`"object":` + string(obj) + `,"oldObject":null,"dryRun":false}}`)
}

func profile(t *testing.T, op, name, spec string) []byte {
	t.Helper()
	return review(t, "plexus.dev", "v1alpha1", "ServiceProfile", "serviceprofiles", op, "booksapp", name,
		"apiVersion: plexus.dev/v1alpha1\nkind: ServiceProfile\nmetadata: {name: "+name+", namespace: booksapp}\nspec: "+spec)
}

func TestRealReviewIsDeniedWithEveryProblem(t *testing.T) {
	srv, m := testServer(t)
	raw, err := os.ReadFile("testdata/create-bad-regex.json")
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, srv.URL, raw)
	if resp.Allowed || resp.UID != "0d7b7f5c-3b8e-4a53-9d5a-0a3c1f6b2e11" || resp.Result == nil {
		t.Fatalf("answer %+v", resp)
	}
	msg := resp.Result.Message
	for _, want := range []string{
		"ServiceProfile booksapp/books.booksapp.svc.cluster.local: ",
		`spec.routes[0].condition.pathRegex: Invalid value: "/books/([0-9]+": error parsing regexp: missing closing )`,
		`; spec.routes[0].timeout: Invalid value: "1m30": time: missing unit`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
	if !strings.HasPrefix(msg, "ServiceProfile booksapp/") || strings.Contains(msg, "\n") {
		t.Errorf("message %q: want one line starting with the profile", msg)
	}
	if resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != "Invalid" {
		t.Errorf("status %d %s, want 422 Invalid", resp.Result.Code, resp.Result.Reason)
	}
	if n := testutil.ToFloat64(m.Reviews.WithLabelValues("denied")); n != 1 {
		t.Errorf("denied count %v", n)
	}
}

func TestProfiles(t *testing.T) {
	srv, _ := testServer(t)
	const name = "books.booksapp.svc.cluster.local"
	linkerd, err := os.ReadFile("../serviceprofile/testdata/linkerd-books.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for tc, c := range map[string]struct {
		review []byte
		want   string // "" for allowed
	}{
		"converted Linkerd profile": {
			review: review(t, "plexus.dev", "v1alpha1", "ServiceProfile", "serviceprofiles", "CREATE", "booksapp", name, string(linkerd)),
		},
		"update to a valid profile": {review: profile(t, "UPDATE", name, `{routes: [{name: r, condition: {method: GET}}]}`)},
		"unknown field": {
			review: profile(t, "CREATE", name, `{routes: [{name: r, conditon: {method: GET}}]}`),
			want:   "ServiceProfile booksapp/" + name + ": spec.routes[0].conditon: unknown field",
		},
		"bad duration on update": {
			review: profile(t, "UPDATE", name, `{retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 10, ttl: "10"}}`),
			want:   `ServiceProfile booksapp/` + name + `: spec.retryBudget.ttl: Invalid value: "10": time: missing unit in duration "10"`,
		},
		"zero weights": {
			review: profile(t, "CREATE", name, `{dstOverrides: [{authority: "books.booksapp.svc.cluster.local:7002", weight: 0}]}`),
			want:   `ServiceProfile booksapp/` + name + `: spec.dstOverrides: Invalid value: "weights 0": the weights must sum to more than zero`,
		},
		"bad name": {
			review: profile(t, "CREATE", "books.booksapp", `{}`),
			want:   `ServiceProfile booksapp/books.booksapp: metadata.name: Invalid value: "books.booksapp": must be <svc>.<ns>.svc.cluster.local`,
		},
	} {
		t.Run(tc, func(t *testing.T) {
			resp := post(t, srv.URL, c.review)
			if c.want == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %s", resp.Result.Message)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || !strings.HasPrefix(resp.Result.Message, c.want) {
				t.Fatalf("answer %+v, want denied with %q", resp.Result, c.want)
			}
		})
	}
}

func TestOtherObjectsAreAllowed(t *testing.T) {
	srv, m := testServer(t)
	const bad = "apiVersion: plexus.dev/v1alpha1\nkind: ServiceProfile\nspec: {routes: [{}]}\nmetadata: {name: x"
	if resp := post(t, srv.URL, review(t, "plexus.dev", "v1alpha1", "ServiceProfile", "serviceprofiles", "CREATE", "booksapp", "x", bad+"}")); resp.Allowed {
		t.Fatal("the bad profile below is allowed on create; the cases prove nothing")
	}
	for tc, r := range map[string][]byte{
		"a ConfigMap":                     review(t, "", "v1", "ConfigMap", "configmaps", "CREATE", "booksapp", "cm", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {spec: nonsense}"),
		"Linkerd's own ServiceProfile":    review(t, "linkerd.io", "v1alpha2", "ServiceProfile", "serviceprofiles", "CREATE", "booksapp", "x", bad+"}"),
		"deleting a bad profile":          review(t, "plexus.dev", "v1alpha1", "ServiceProfile", "serviceprofiles", "DELETE", "booksapp", "x", bad+"}"),
		"finalizing a stored bad profile": review(t, "plexus.dev", "v1alpha1", "ServiceProfile", "serviceprofiles", "UPDATE", "booksapp", "x", bad+", deletionTimestamp: '2026-11-23T10:00:00Z', finalizers: []}"),
	} {
		t.Run(tc, func(t *testing.T) {
			if resp := post(t, srv.URL, r); !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
		})
	}
	if n := testutil.ToFloat64(m.Reviews.WithLabelValues("skipped")); n != 3 {
		t.Errorf("skipped count %v, want 3", n)
	}
}

func TestNotAReview(t *testing.T) {
	srv, m := testServer(t)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"kind":"AdmissionReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || testutil.ToFloat64(m.Reviews.WithLabelValues("error")) != 1 {
		t.Errorf("status %s, error count %v", resp.Status, testutil.ToFloat64(m.Reviews.WithLabelValues("error")))
	}
}
