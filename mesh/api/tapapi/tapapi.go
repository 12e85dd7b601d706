// Package tapapi holds the wire types of the tap service's aggregated API,
// tap.plexus.dev/v1alpha1 (ARCHITECTURE.md §10), shared by the service
// (plexus-control tap), the CLI (plexusctl viz tap|top) and the dashboard.
//
// A tap is a POST, through the Kubernetes API server, to
//
//	/apis/tap.plexus.dev/v1alpha1/watch/namespaces/{ns}/tap                 every meshed pod of a namespace
//	/apis/tap.plexus.dev/v1alpha1/watch/namespaces/{ns}/{resource}/{name}/tap
//
// with a Request as its JSON body. The "watch" segment makes the API
// server authorize the caller for verb watch on {resource}/tap in group
// tap.plexus.dev before it forwards the call; the tap service checks the
// same with a SubjectAccessReview. The answer streams Events, one JSON
// object per line (Content-Type application/x-ndjson), until the caller
// leaves or the tap's limit is reached.
package tapapi

import "time"

// Group and Version name the aggregated API.
const (
	Group   = "tap.plexus.dev"
	Version = "v1alpha1"
	// Subresource is the RBAC subresource every tap is authorized for.
	Subresource = "tap"
	// Verb is the RBAC verb every tap is authorized for.
	Verb = "watch"
)

// Resources are the kinds a tap may target: the {resource} of the path
// (plural, lower case, as RBAC names them).
var Resources = []string{"namespaces", "pods", "deployments", "daemonsets", "statefulsets", "replicasets", "jobs", "cronjobs", "services"}

// Path returns the URL path of a tap on one resource; name "" and
// resource "namespaces" tap namespace ns.
func Path(ns, resource, name string) string {
	base := "/apis/" + Group + "/" + Version + "/watch/namespaces/" + ns
	if resource == "namespaces" || resource == "" {
		return base + "/tap"
	}
	return base + "/" + resource + "/" + name + "/tap"
}

// Request is a tap's filter and limits. Empty fields match everything.
type Request struct {
	// Direction is "inbound", "outbound" or "" (both).
	Direction string `json:"direction,omitempty"`
	// To narrows requests to those going to a destination: the pods of
	// a namespace, optionally of a resource in it as in the path
	// ("deployments", "web") and optionally those matching a label
	// selector ("app=books,tier!=cache"); a Service's cluster IPs count
	// as its. ToAddrs adds addresses (IP or IP:port) that match too.
	ToNamespace string   `json:"toNamespace,omitempty"`
	ToResource  string   `json:"toResource,omitempty"`
	ToName      string   `json:"toName,omitempty"`
	ToSelector  string   `json:"toSelector,omitempty"`
	ToAddrs     []string `json:"toAddrs,omitempty"`
	// From narrows requests to those coming from a source, named as To
	// is (a Service's cluster IPs are never a source).
	FromNamespace string   `json:"fromNamespace,omitempty"`
	FromResource  string   `json:"fromResource,omitempty"`
	FromName      string   `json:"fromName,omitempty"`
	FromSelector  string   `json:"fromSelector,omitempty"`
	FromAddrs     []string `json:"fromAddrs,omitempty"`
	// Method is an HTTP method (exact); Authority, a :authority or Host
	// (exact); PathPrefix, a prefix of the path; Route, the name of the
	// route the request matched.
	Method     string `json:"method,omitempty"`
	Authority  string `json:"authority,omitempty"`
	PathPrefix string `json:"pathPrefix,omitempty"`
	Route      string `json:"route,omitempty"`
	// RedactHeaders names headers whose values the events must not show,
	// besides those always redacted (AlwaysRedacted) and those redacted
	// by default (redaction.go); RedactQueryParams, query parameters
	// whose values the path must not show, besides the defaults.
	RedactHeaders     []string `json:"redactHeaders,omitempty"`
	RedactQueryParams []string `json:"redactQueryParams,omitempty"`
	// ShowHeaders and ShowQueryParams name headers and query parameters
	// redacted by default whose values this tap shows all the same; never
	// those of AlwaysRedacted (a tap that names one is refused).
	ShowHeaders     []string `json:"showHeaders,omitempty"`
	ShowQueryParams []string `json:"showQueryParams,omitempty"`
	// MaxEventRate bounds the events per second over all the tapped
	// pods (0: DefaultMaxEventRate), split across the pods. Each request
	// yields EventsPerRequest events, and is observed whole or not at
	// all.
	MaxEventRate float64 `json:"maxEventsPerSecond,omitempty"`
	// Limit ends the tap after this many requests (0: no limit).
	Limit int `json:"limit,omitempty"`
}

// Rates of a tap, in events per second.
const (
	// DefaultMaxEventRate is a tap's rate when it asks for none;
	// MinEventRate and MaxEventRate, the least and most it may ask for.
	DefaultMaxEventRate = 100
	MinEventRate        = 0.01
	MaxEventRate        = 3000
	// EventsPerRequest is what one request yields: RequestStart,
	// ResponseStart and ResponseEnd.
	EventsPerRequest = 3
)

// ValidEventRate reports whether a tap may ask for rate: 0 (the default)
// or MinEventRate to MaxEventRate.
func ValidEventRate(rate float64) bool {
	return rate == 0 || rate >= MinEventRate && rate <= MaxEventRate
}

// MaxFilterString bounds each string of a Request's filter (method,
// authority, path prefix, route, selectors).
const MaxFilterString = 1024

// AlwaysRedacted are the headers whose values no tap ever sees; what
// else is redacted, by default or as a tap asks, is Redaction's
// (redaction.go).
var AlwaysRedacted = []string{"authorization", "cookie", "proxy-authorization"}

// Event types.
const (
	RequestStart  = "requestStart"
	ResponseStart = "responseStart"
	ResponseEnd   = "responseEnd"
	// Dropped reports events a proxy dropped because the tapper was
	// slow; Count says how many since the last report.
	Dropped = "dropped"
	// Error reports a pod that could not be tapped (Message says why);
	// the others go on.
	Error = "error"
)

// Event is one line of a tap's answer.
type Event struct {
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	// ID names the request among this tap's events: "<pod>:<n>".
	ID string `json:"id,omitempty"`
	// Namespace and Pod are the tapped pod (whose proxy saw the request).
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Direction is "inbound" or "outbound" (as seen by Pod's proxy).
	Direction string `json:"direction,omitempty"`

	Source      Peer `json:"source"`
	Destination Peer `json:"destination"`
	// TLS: the request travelled over mesh mTLS.
	TLS bool `json:"tls"`

	// RequestStart. Path carries the query string, the values of its
	// redacted parameters replaced by Redacted.
	Method    string   `json:"method,omitempty"`
	Scheme    string   `json:"scheme,omitempty"`
	Authority string   `json:"authority,omitempty"`
	Path      string   `json:"path,omitempty"`
	Route     string   `json:"route,omitempty"`
	Headers   []Header `json:"headers,omitempty"`

	// ResponseStart: the status and the time since RequestStart.
	Status    int     `json:"status,omitempty"`
	LatencyMs float64 `json:"latencyMs,omitempty"`

	// ResponseEnd: the time since RequestStart, the response body's
	// bytes, the gRPC status (when gRPC) and the error that ended the
	// exchange early ("" when it ended well; e.g. a reset).
	DurationMs    float64 `json:"durationMs,omitempty"`
	ResponseBytes int64   `json:"responseBytes,omitempty"`
	GRPCStatus    *int    `json:"grpcStatus,omitempty"`
	Reason        string  `json:"reason,omitempty"`

	// Dropped.
	Count uint64 `json:"count,omitempty"`
	// Error.
	Message string `json:"message,omitempty"`
}

// KindServiceAccount is the WorkloadKind of a peer named by its identity
// (Peer.Cluster).
const KindServiceAccount = "ServiceAccount"

// Peer is one end of a request.
type Peer struct {
	// Addr is IP:port.
	Addr string `json:"addr,omitempty"`
	// Identity is the peer's mesh identity, when the request travelled
	// over mesh mTLS (the client's on inbound, the server's on outbound).
	Identity string `json:"identity,omitempty"`
	// Cluster is the trust domain of an identity of another trust domain
	// than the tap service's: a linked cluster's peer, named by its
	// identity (Namespace, WorkloadKind ServiceAccount), not by address.
	Cluster string `json:"cluster,omitempty"`
	// Namespace and the owning workload, when the tap service knows the
	// address as a pod's (or the peer by its identity: Cluster, or a pod
	// relaying for another, such as a gateway).
	Namespace    string `json:"namespace,omitempty"`
	Pod          string `json:"pod,omitempty"`
	WorkloadKind string `json:"workloadKind,omitempty"`
	WorkloadName string `json:"workloadName,omitempty"`
}

// Header is one request header; Value is "REDACTED" for the redacted ones
// (authorization, cookie, proxy-authorization, the defaults and those the
// tap names: Redaction).
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Redacted replaces the value of a redacted header or query parameter.
const Redacted = "REDACTED"

// Limits of the proxies' tap API that both ends hold: the tap service
// refuses a request a proxy would refuse, with a clearer error.
const (
	// MaxRequestBytes bounds a session's request (its filter).
	MaxRequestBytes = 64 << 10
	// MaxName bounds a name in a request (a header or query parameter to
	// redact or show) and the short strings of an event.
	MaxName = 64
	// MaxRedactionNames bounds each of a session's lists of names to
	// redact or show.
	MaxRedactionNames = 32
)
