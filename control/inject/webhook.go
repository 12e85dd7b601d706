package inject

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/admissionhttp"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// MaxReviewBytes bounds an AdmissionReview body (a pod is far smaller).
const MaxReviewBytes = admissionhttp.MaxReviewBytes

// NewMetrics registers the webhook's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *admissionhttp.Metrics {
	return admissionhttp.NewMetrics(reg, "injector", "Pod")
}

// Webhook answers AdmissionReviews for pods with the injection patch.
type Webhook struct {
	Config Config
	// Namespace returns a namespace by name (from an informer's lister).
	Namespace func(name string) (*corev1.Namespace, error)
	Metrics   *admissionhttp.Metrics // results: injected, skipped, rejected, error
	Log       *slog.Logger
}

// ServeHTTP handles one AdmissionReview (admission.k8s.io/v1). A body that
// is not one is answered with 400 naming the problem; a pod that cannot be
// injected is denied with a message naming the bad setting.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	admissionhttp.Serve(rw, r, w.review, func() { w.count("error") })
}

// review decides one request: allowed with a patch, allowed unchanged, or
// denied with the reason.
func (w *Webhook) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Kind != "Pod" {
		w.count("skipped")
		return allow
	}
	creating := req.Operation == admissionv1.Create && req.SubResource == ""
	addingEphemeral := req.Operation == admissionv1.Update && req.SubResource == "ephemeralcontainers"
	if !creating && !addingEphemeral {
		w.count("skipped")
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return w.deny(req, fmt.Errorf("decoding the pod: %w", err))
	}
	if hasProxy(&pod) {
		// Meshed already (a debug container added to a meshed pod, or a
		// pod injected before admission): nothing to inject, but its
		// containers must not run as the proxy.
		if err := checkMeshedPod(&pod); err != nil {
			return w.deny(req, err)
		}
		w.count("skipped")
		return allow
	}
	if addingEphemeral {
		w.count("skipped")
		return allow
	}
	ns, err := w.Namespace(req.Namespace)
	if err != nil {
		// Deny rather than admit un-meshed: the namespace may require the mesh.
		return w.deny(req, fmt.Errorf("reading namespace %s: %w", req.Namespace, err))
	}
	d, err := Decide(&pod, ns)
	if err != nil {
		return w.deny(req, err)
	}
	if !d.Inject {
		w.count("skipped")
		w.Log.Debug("not injecting", "namespace", req.Namespace, "pod", podName(&pod), "reason", d.Reason)
		return allow
	}
	ops, err := Patch(&pod, ns, w.Config)
	if err != nil {
		return w.deny(req, err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return w.deny(req, fmt.Errorf("encoding the patch: %w", err))
	}
	w.count("injected")
	w.Log.Info("injected", "namespace", req.Namespace, "pod", podName(&pod), "reason", d.Reason)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: raw, PatchType: &pt}
}

// checkMeshedPod checks a pod that already runs the proxy with the UID
// and GID its (admitted, fixed) annotations give the proxy.
func checkMeshedPod(pod *corev1.Pod) error {
	redirect, err := podcontract.FromAnnotations(podcontract.Defaults(), pod.Annotations)
	if err != nil {
		return err
	}
	return checkProxyIDs(&pod.Spec, redirect.ProxyUID, redirect.ProxyGID)
}

func (w *Webhook) deny(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	w.count("rejected")
	w.Log.Info("rejected", "namespace", req.Namespace, "name", req.Name, "err", err)
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
		Message: "plexus injector: " + err.Error(),
	}}
}

func (w *Webhook) count(result string) {
	if w.Metrics != nil {
		w.Metrics.Reviews.WithLabelValues(result).Inc()
	}
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}
