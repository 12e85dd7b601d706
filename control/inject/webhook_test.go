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

	"github.com/plexus-mesh/plexus/control/admissionhttp"
)

func testWebhook(t *testing.T) (*httptest.Server, *admissionhttp.Metrics) {
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
	return postReviewOf(t, url, ns, admissionv1.Create, "", pod)
}

func postReviewOf(t *testing.T, url, ns string, op admissionv1.Operation, subresource string, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(pod)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: op, SubResource: subresource, Namespace: ns, Object: runtime.RawExtension{Raw: raw},
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

// A container other than the proxy that would run as the proxy's UID or
// GID (its own or the pod's securityContext) is refused, naming it: the
// redirect rules exempt those IDs. Debug containers added to a meshed
// pod are checked too; other pods' are not the injector's business.
func TestWebhookRefusesProxyIDs(t *testing.T) {
	srv, m := testWebhook(t)
	id := func(v int64) *int64 { return &v }
	pod := func(mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Image: "x"}},
			Containers:     []corev1.Container{{Name: "app", Image: "x"}, {Name: "side", Image: "x"}}}}
		mod(p)
		return p
	}
	refused := []struct {
		name, want string
		pod        *corev1.Pod
	}{
		{"container UID", `container "app" runs as UID 2102`, pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: id(2102)}
		})},
		{"container GID", `container "side" runs as GID 2102`, pod(func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: id(1000), RunAsGroup: id(2102)}
		})},
		{"init container", `init container "setup" runs as UID 2102 and GID 2102`, pod(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: id(2102), RunAsGroup: id(2102)}
		})},
		{"pod default", `container "side" runs as UID 2102`, pod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: id(2102)}
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: id(1000)}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: id(1000)}
		})},
		{"configured proxy UID", `container "app" runs as UID 3000`, pod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"config.plexus.dev/proxy-uid": "3000"}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: id(3000)}
		})},
	}
	for _, tc := range refused {
		resp := postReview(t, srv.URL, "shop", tc.pod)
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: want refused naming %q, got %+v", tc.name, tc.want, resp.Result)
		}
	}
	allowed := pod(func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: id(2102), RunAsGroup: id(2102), FSGroup: id(2102), SupplementalGroups: []int64{2102}}
		for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range cs {
				cs[i].SecurityContext = &corev1.SecurityContext{RunAsUser: id(1000), RunAsGroup: id(1000)}
			}
		}
	})
	if resp := postReview(t, srv.URL, "shop", allowed); !resp.Allowed {
		t.Errorf("containers overriding the pod's IDs (and the proxy GID only as fsGroup): refused %+v", resp.Result)
	}

	// A meshed pod gaining a debug container as the proxy: refused; the
	// same container in an unmeshed pod: not the mesh's business.
	meshed := pod(func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ContainerName, Image: "proxy",
			SecurityContext: &corev1.SecurityContext{RunAsUser: id(2102), RunAsGroup: id(2102)}})
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "x", SecurityContext: &corev1.SecurityContext{RunAsUser: id(2102)}}}}
	})
	resp := postReviewOf(t, srv.URL, "shop", admissionv1.Update, "ephemeralcontainers", meshed)
	if resp.Allowed || !strings.Contains(resp.Result.Message, `ephemeral container "debugger" runs as UID 2102`) {
		t.Errorf("debug container as the proxy's UID in a meshed pod: %+v", resp.Result)
	}
	unmeshed := meshed.DeepCopy()
	unmeshed.Spec.Containers = unmeshed.Spec.Containers[:2]
	if resp := postReviewOf(t, srv.URL, "shop", admissionv1.Update, "ephemeralcontainers", unmeshed); !resp.Allowed {
		t.Errorf("debug container in an unmeshed pod: refused %+v", resp.Result)
	}
	if resp := postReviewOf(t, srv.URL, "shop", admissionv1.Create, "", meshed); resp.Allowed {
		t.Errorf("a pod created with the proxy already in it, and an app as its UID: allowed")
	}
	if got := testutil.ToFloat64(m.Reviews.WithLabelValues("rejected")); got != float64(len(refused)+2) {
		t.Errorf("reviews{result=rejected} = %v, want %d", got, len(refused)+2)
	}
}
