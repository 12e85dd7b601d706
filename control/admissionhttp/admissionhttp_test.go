package admissionhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func serve(t *testing.T, method, ctype, body string) (*httptest.ResponseRecorder, int, *admissionv1.AdmissionRequest) {
	t.Helper()
	var bad int
	var got *admissionv1.AdmissionRequest
	rw := httptest.NewRecorder()
	r := httptest.NewRequest(method, "/validate", strings.NewReader(body))
	r.Header.Set("Content-Type", ctype)
	Serve(rw, r, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		got = req
		return &admissionv1.AdmissionResponse{Allowed: true}
	}, func() { bad++ })
	return rw, bad, got
}

func TestServeAnswersWithTheRequestUID(t *testing.T) {
	rw, bad, req := serve(t, http.MethodPost, "application/json; charset=utf-8",
		`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-7","operation":"CREATE"}}`)
	if rw.Code != http.StatusOK || bad != 0 || req == nil || req.Operation != admissionv1.Create {
		t.Fatalf("code %d, bad %d, request %+v: %s", rw.Code, bad, req, rw.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rw.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != "u-7" || !out.Response.Allowed {
		t.Errorf("answer %s", rw.Body)
	}
}

func TestServeRefusesWhatIsNotAReview(t *testing.T) {
	for name, tc := range map[string]struct {
		method, ctype, body string
		code, bad           int
	}{
		"GET":          {http.MethodGet, "application/json", "", http.StatusMethodNotAllowed, 0},
		"YAML":         {http.MethodPost, "application/yaml", "{}", http.StatusUnsupportedMediaType, 1},
		"not JSON":     {http.MethodPost, "application/json", "{", http.StatusBadRequest, 1},
		"no request":   {http.MethodPost, "application/json", `{"kind":"AdmissionReview"}`, http.StatusBadRequest, 1},
		"over the cap": {http.MethodPost, "application/json", `{"x":"` + strings.Repeat("a", MaxReviewBytes) + `"}`, http.StatusBadRequest, 1},
	} {
		t.Run(name, func(t *testing.T) {
			rw, bad, req := serve(t, tc.method, tc.ctype, tc.body)
			if rw.Code != tc.code || bad != tc.bad || req != nil {
				t.Errorf("code %d (want %d), bad %d (want %d), decided %v", rw.Code, tc.code, bad, tc.bad, req != nil)
			}
		})
	}
}
