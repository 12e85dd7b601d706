// Package admissionhttp is the HTTP side every Plexus admission webhook
// shares: it reads an admission.k8s.io/v1 AdmissionReview from a POST,
// asks a decision function for the answer and writes it back; and the
// count of a webhook's answers.
package admissionhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	admissionv1 "k8s.io/api/admission/v1"
)

// MaxReviewBytes bounds an AdmissionReview body (the API server's own
// request limit is 3 MiB).
const MaxReviewBytes = 3 << 20

// Metrics count a webhook's answers.
type Metrics struct {
	Reviews *prometheus.CounterVec // by result, which the webhook names
}

// NewMetrics registers on reg plexus_WEBHOOK_reviews_total, the reviews
// of objects (a word: "Pod") the webhook answered, by result.
func NewMetrics(reg prometheus.Registerer, webhook, objects string) *Metrics {
	return &Metrics{Reviews: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_" + webhook + "_reviews_total", Help: objects + " admission reviews answered, by result.",
	}, []string{"result"})}
}

// Serve answers one AdmissionReview with decide's response, given the
// request's UID. A body that is not a review is answered 400 (or 415 for
// another content type) naming the problem, and bad, if not nil, is
// called; a method other than POST is answered 405.
func Serve(rw http.ResponseWriter, r *http.Request, decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse, bad func()) {
	if r.Method != http.MethodPost {
		http.Error(rw, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	fail := func(code int, msg string) {
		if bad != nil {
			bad()
		}
		http.Error(rw, msg, code)
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		fail(http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q, want application/json", ct))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	if err != nil || len(body) > MaxReviewBytes {
		fail(http.StatusBadRequest, fmt.Sprintf("reading the review: body unreadable or over %d bytes", MaxReviewBytes))
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		fail(http.StatusBadRequest, fmt.Sprintf("not an AdmissionReview with a request: %v", err))
		return
	}
	resp := decide(review.Request)
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(out)
}
