package inject

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func testWebhook(t *testing.T) (*httptest.Server, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	enabled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{AnnotationInject: "enabled"}}}
	w := &Webhook{
		Config: testConfig(),
		Namespace: func(name string) (*corev1.Namespace, error) {
			if name == "shop" {
				return enabled, nil
			}
			return nil, io.ErrUnexpectedEOF
		},
		Metrics: m,
		Log:     slog.New(slog.DiscardHandler),
	}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	return srv, m
}

func postReview(t *testing.T, url, ns string, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(pod)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: raw},
		},
	}
	body, _ := json.Marshal(review)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
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
	if out.Response == nil || out.Response.UID != "uid-1" || out.APIVersion != "admission.k8s.io/v1" {
		t.Fatalf("response does not answer the request: %+v", out)
	}
	return out.Response
}

func TestWebhookInjectsAndDenies(t *testing.T) {
	srv, m := testWebhook(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	resp := postReview(t, srv.URL, "shop", pod)
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("pod in an enabled namespace: %+v", resp)
	}
	var ops []Op
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	patched := apply(t, pod, ops)
	if len(patched.Spec.InitContainers) != 1 || patched.Spec.InitContainers[0].Name != ContainerName {
		t.Fatalf("patched pod has init containers %+v", patched.Spec.InitContainers)
	}

	bad := pod.DeepCopy()
	bad.Annotations = map[string]string{"config.plexus.dev/opaque-ports": "5432,x"}
	resp = postReview(t, srv.URL, "shop", bad)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, `config.plexus.dev/opaque-ports="5432,x"`) {
		t.Fatalf("malformed annotation: %+v", resp.Result)
	}

	resp = postReview(t, srv.URL, "gone", pod)
	if resp.Allowed || !strings.Contains(resp.Result.Message, "namespace gone") {
		t.Fatalf("unreadable namespace must deny, not admit un-meshed: %+v", resp)
	}
	for result, want := range map[string]float64{"injected": 1, "rejected": 2} {
		if got := testutil.ToFloat64(m.Reviews.WithLabelValues(result)); got != want {
			t.Errorf("reviews{result=%q} = %v, want %v", result, got, want)
		}
	}
}

func TestWebhookRejectsGarbage(t *testing.T) {
	srv, m := testWebhook(t)
	for _, tc := range []struct {
		ctype, body string
		status      int
	}{
		{"application/json", "{not json", http.StatusBadRequest},
		{"application/json", `{"kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"text/plain", "hello", http.StatusUnsupportedMediaType},
	} {
		resp, err := http.Post(srv.URL, tc.ctype, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || len(msg) == 0 {
			t.Errorf("%s %q: %s %q, want %d with a reason", tc.ctype, tc.body, resp.Status, msg, tc.status)
		}
	}
	if got := testutil.ToFloat64(m.Reviews.WithLabelValues("error")); got != 3 {
		t.Errorf("reviews{result=error} = %v, want 3", got)
	}
}
