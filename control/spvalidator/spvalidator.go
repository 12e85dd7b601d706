// Package spvalidator is the admission webhook that refuses a malformed
// ServiceProfile (plexus.dev/v1alpha1) with every problem named, and lets
// every other object through.
package spvalidator

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/admissionhttp"
	"github.com/plexus-mesh/plexus/control/serviceprofile"
)

// NewMetrics registers the webhook's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *admissionhttp.Metrics {
	return admissionhttp.NewMetrics(reg, "sp_validator", "ServiceProfile")
}

// Webhook answers AdmissionReviews for ServiceProfiles.
type Webhook struct {
	// ClusterDomain is what a profile's name must end in
	// (<svc>.<ns>.svc.<ClusterDomain>).
	ClusterDomain string
	Metrics       *admissionhttp.Metrics // may be nil; results: allowed, denied, skipped, error
	Log           *slog.Logger
}

// ServeHTTP handles one AdmissionReview (admission.k8s.io/v1): a body that
// is not one is answered 400; a ServiceProfile that does not decode or
// validate is denied with a message "ServiceProfile <ns>/<name>: " and its
// problems; anything else is allowed.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	admissionhttp.Serve(rw, r, w.review, func() { w.count("error") })
}

// review decides one request.
func (w *Webhook) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	gv := serviceprofile.GroupVersionResource
	if req.Kind.Group != gv.Group || req.Kind.Kind != serviceprofile.Kind ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		w.count("skipped")
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	name := req.Name
	sp, err := serviceprofile.Decode(req.Object.Raw)
	if err == nil {
		if name == "" {
			name = sp.Name // a create may leave the request's name empty
		}
		if sp.DeletionTimestamp != nil && req.Operation == admissionv1.Update {
			// Finalizers of a profile on its way out (perhaps stored
			// before this webhook existed) must be removable.
			w.count("allowed")
			return &admissionv1.AdmissionResponse{Allowed: true}
		}
		err = sp.Validate(w.ClusterDomain)
	}
	if err != nil {
		return w.deny(req, name, err)
	}
	w.count("allowed")
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func (w *Webhook) deny(req *admissionv1.AdmissionRequest, name string, err error) *admissionv1.AdmissionResponse {
	w.count("denied")
	w.Log.Info("denied", "namespace", req.Namespace, "name", name, "operation", req.Operation, "err", err)
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: fmt.Sprintf("ServiceProfile %s/%s: %s", req.Namespace, name, problems(err)),
	}}
}

// problems lists a joined error's problems on one line, "; " between them.
func problems(err error) string {
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) {
		return err.Error()
	}
	s := make([]string, 0, len(list.Unwrap()))
	for _, e := range list.Unwrap() {
		s = append(s, e.Error())
	}
	return strings.Join(s, "; ")
}

func (w *Webhook) count(result string) {
	if w.Metrics != nil {
		w.Metrics.Reviews.WithLabelValues(result).Inc()
	}
}
