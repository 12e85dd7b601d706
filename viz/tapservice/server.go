// Package tapservice is the tap service (plexus-control tap): the aggregated API
// tap.plexus.dev/v1alpha1 (mesh/api/tapapi). It authenticates the API
// server's forwarded caller, authorizes every tap with a
// SubjectAccessReview, and fans the tap out to the selected pods' proxies
// (their tap API on 4190, over mutual TLS with the tap service's own mesh
// identity), streaming their events back as JSON lines.
package tapservice

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
)

// Limits of the service.
const (
	// MaxTaps bounds the taps served at once; more are answered 429.
	MaxTaps = 50
	// MaxProxyStreams bounds the streams to proxies of all open taps
	// (each tap has one per pod): beyond it a tap is refused.
	MaxProxyStreams = 500
	// MaxPeerAddrs bounds the addresses a tap's "to" or "from" filter
	// resolves to; what is sent to the proxies must also fit in their
	// tapapi.MaxRequestBytes.
	MaxPeerAddrs = 700
	// MaxRedactionNames bounds each of a tap's lists of names to redact
	// or show (headers, query parameters; each name at most the proxies'
	// tapapi.MaxName).
	MaxRedactionNames = tapapi.MaxRedactionNames
	// maxBody bounds a tap request's body.
	maxBody = 64 << 10
)

// Options configure a Handler.
type Options struct {
	Kube  kubernetes.Interface
	Auth  *FrontProxy
	Certs mtls.CertSource // the tap service's mesh identity
	// TrustDomain names the proxies' identities.
	TrustDomain string
	Log         *slog.Logger
	// Dial overrides how a proxy's tap API is reached (tests).
	Dial DialFunc
}

// Handler serves the aggregated API.
type Handler struct {
	o       Options
	auth    atomic.Pointer[FrontProxy]
	open    atomic.Int32 // taps
	streams atomic.Int32 // streams to proxies
	peers   *peerCache
}

// New returns the service's HTTP handler.
func New(o Options) *Handler {
	if o.Dial == nil {
		o.Dial = dialProxy(o.Certs)
	}
	h := &Handler{o: o, peers: newPeerCache(o.Kube, o.TrustDomain)}
	h.auth.Store(o.Auth)
	return h
}

// SetAuth replaces how callers are authenticated (the API server's
// front-proxy CA rotated).
func (h *Handler) SetAuth(fp *FrontProxy) { h.auth.Store(fp) }

var groupVersion = "/apis/" + tapapi.Group + "/" + tapapi.Version

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, err := h.auth.Load().Authenticate(r)
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, err.Error())
		return
	}
	switch {
	case r.URL.Path == groupVersion && r.Method == http.MethodGet:
		writeJSON(w, resourceList())
	case r.URL.Path == "/apis/"+tapapi.Group && r.Method == http.MethodGet:
		writeJSON(w, apiGroup())
	default:
		t, ok := parsePath(r.URL.Path)
		if !ok {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s: not a tap (want POST %s)", r.URL.Path, tapapi.Path("NAMESPACE", "RESOURCE", "NAME")))
			return
		}
		if r.Method != http.MethodPost {
			writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "a tap is a POST")
			return
		}
		h.tap(w, r, user, t)
	}
}

// tap serves one tap: authorize, decode, fan out, stream.
func (h *Handler) tap(w http.ResponseWriter, r *http.Request, user User, t target) {
	ctx := r.Context()
	ok, reason, err := authorize(ctx, h.o.Kube, user, t)
	switch {
	case err != nil:
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	case !ok:
		h.o.Log.Info("tap refused", "user", user.Name, "target", t.resource+"/"+t.name, "namespace", t.namespace)
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, reason)
		return
	}
	req, err := decodeRequest(r.Body)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	if h.open.Add(1) > MaxTaps {
		h.open.Add(-1)
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, fmt.Sprintf("%d taps are open already", MaxTaps))
		return
	}
	defer h.open.Add(-1)
	ps, err := pods(ctx, h.o.Kube, t)
	if err != nil {
		code, why := http.StatusInternalServerError, metav1.StatusReasonInternalError
		if apierrors.IsNotFound(err) {
			code, why = http.StatusNotFound, metav1.StatusReasonNotFound
		}
		writeStatus(w, code, why, err.Error())
		return
	}
	dsts, srcs, err := peerAddrs(ctx, h.o.Kube, callerRights(h.o.Kube, user), t.namespace, req)
	var notFound *notFoundError
	var noReview *reviewError
	switch {
	case errors.As(err, &notFound):
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, err.Error())
		return
	case errors.As(err, &noReview):
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	case err != nil:
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	if err := fitsProxies(req, dsts, srcs); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	h.o.Log.Info("tap", "user", user.Name, "target", t.resource+"/"+t.name, "namespace", t.namespace, "pods", len(ps))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
	h.fanOut(ctx, w, ps, req, dsts, srcs)
}

// decodeRequest reads a tap request's body (empty: every default) and
// checks its values.
func decodeRequest(body io.Reader) (tapapi.Request, error) {
	var req tapapi.Request
	dec := json.NewDecoder(io.LimitReader(body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		return req, fmt.Errorf("tap request body: %w", err)
	}
	return req, validate(&req)
}

// fitsProxies checks that what a tap asks of the proxies fits in the
// request they take.
func fitsProxies(req tapapi.Request, dsts, srcs []string) error {
	if n := proto.Size(observeRequest(req, dsts, srcs, 1)); n > tapapi.MaxRequestBytes {
		return fmt.Errorf("the tap's filter is %d bytes for the proxies (%d destination and %d source addresses), more than the %d they take: narrow --to or --from",
			n, len(dsts), len(srcs), tapapi.MaxRequestBytes)
	}
	return nil
}

// validate checks a tap request's values.
func validate(r *tapapi.Request) error {
	switch r.Direction {
	case "", "inbound", "outbound":
	default:
		return fmt.Errorf("direction %q: want inbound, outbound or empty", r.Direction)
	}
	if !tapapi.ValidEventRate(r.MaxEventRate) {
		return fmt.Errorf("maxEventsPerSecond %v: want 0 (%d) or %g to %d", r.MaxEventRate, tapapi.DefaultMaxEventRate, tapapi.MinEventRate, tapapi.MaxEventRate)
	}
	if r.Limit < 0 || r.Limit > math.MaxUint32 {
		return fmt.Errorf("limit %d: want 0 (none) to %d", r.Limit, uint32(math.MaxUint32))
	}
	for name, v := range map[string]string{"method": r.Method, "authority": r.Authority, "pathPrefix": r.PathPrefix, "route": r.Route,
		"toSelector": r.ToSelector, "fromSelector": r.FromSelector} {
		if len(v) > tapapi.MaxFilterString {
			return fmt.Errorf("%s: %d bytes, want at most %d", name, len(v), tapapi.MaxFilterString)
		}
	}
	for _, l := range []struct {
		field  string
		names  []string
		header bool
	}{
		{"redactHeaders", r.RedactHeaders, true}, {"showHeaders", r.ShowHeaders, true},
		{"redactQueryParams", r.RedactQueryParams, false}, {"showQueryParams", r.ShowQueryParams, false},
	} {
		if len(l.names) > MaxRedactionNames {
			return fmt.Errorf("%s: %d names, want at most %d", l.field, len(l.names), MaxRedactionNames)
		}
		for _, n := range l.names {
			switch {
			case l.header && (!httpguts.ValidHeaderFieldName(n) || len(n) > tapapi.MaxName):
				return fmt.Errorf("%s: %q is not a header name of at most %d bytes", l.field, n, tapapi.MaxName)
			case !l.header && (!tapapi.ValidQueryParamName(n) || len(n) > tapapi.MaxName):
				return fmt.Errorf("%s: %q is not a query parameter name of at most %d bytes (printable, without space, '&', ';' or '=')", l.field, n, tapapi.MaxName)
			}
		}
	}
	for _, n := range r.ShowHeaders {
		if tapapi.IsAlwaysRedacted(n) {
			return fmt.Errorf("showHeaders: %q: %s are always redacted, whatever a tap asks", n, strings.Join(tapapi.AlwaysRedacted, ", "))
		}
	}
	if r.MaxEventRate == 0 {
		r.MaxEventRate = tapapi.DefaultMaxEventRate
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// writeStatus answers with a Kubernetes Status, which kubectl and
// client-go show as the error's message.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(st)
}

// resourceList is the discovery document of tap.plexus.dev/v1alpha1.
func resourceList() *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: tapapi.Group + "/" + tapapi.Version}
	for _, r := range tapapi.Resources {
		namespaced := r != "namespaces"
		l.APIResources = append(l.APIResources,
			metav1.APIResource{Name: r, Namespaced: namespaced, Kind: "Tap", Verbs: metav1.Verbs{}},
			metav1.APIResource{Name: r + "/" + tapapi.Subresource, Namespaced: namespaced, Kind: "Tap", Verbs: metav1.Verbs{tapapi.Verb}})
	}
	return l
}

func apiGroup() *metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: tapapi.Group + "/" + tapapi.Version, Version: tapapi.Version}
	return &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name: tapapi.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}
