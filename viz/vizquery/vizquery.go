// Package vizquery asks the viz extension's Prometheus (ARCHITECTURE.md §10) for
// the mesh's golden metrics, their recent history, the edges between
// workloads and per-route traffic, as plain structs. Its figures are
// plexusctl stat's (viz/meshstats) computed from Prometheus: the
// inbound side of each proxy, success by the proxy's classification,
// mTLS share by the tls label.
package vizquery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Where the viz extension runs its Prometheus (deploy/plexus-viz).
const (
	Namespace         = "plexus-viz"
	PrometheusService = "plexus-prometheus"
	DefaultURL        = "http://" + PrometheusService + "." + Namespace + ".svc:9090"
	// DefaultWindow is the range golden metrics are rated over: six
	// scrapes at the extension's 10 s interval.
	DefaultWindow = time.Minute
)

// Client queries one Prometheus.
type Client struct {
	api v1.API
	// Now is the evaluation time of instant queries and the end of
	// ranges; tests replace it.
	Now func() time.Time
}

// New returns a client of the Prometheus HTTP API at url; rt nil means
// http.DefaultTransport.
func New(url string, rt http.RoundTripper) (*Client, error) {
	c, err := api.NewClient(api.Config{Address: url, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %q: %w", url, err)
	}
	return &Client{api: v1.NewAPI(c), Now: time.Now}, nil
}

// Filter narrows a query to one namespace, workload or pod; empty fields
// match every value.
type Filter struct {
	Namespace    string
	WorkloadKind string
	WorkloadName string
	Pod          string
}

// Level is what one row of golden metrics stands for.
type Level string

// Levels.
const (
	ByNamespace Level = "namespace"
	ByWorkload  Level = "workload"
	ByPod       Level = "pod"
)

// labels are the series labels a row of level is grouped by.
func (l Level) labels() ([]string, error) {
	switch l {
	case ByNamespace:
		return []string{labelNamespace}, nil
	case ByWorkload:
		return []string{labelNamespace, labelWorkloadKind, labelWorkloadName}, nil
	case ByPod:
		return []string{labelNamespace, labelWorkloadKind, labelWorkloadName, labelPod}, nil
	}
	return nil, fmt.Errorf("unknown level %q: want namespace, workload or pod", l)
}

// Key names a row: the fields its level groups by, the others empty.
type Key struct {
	Namespace    string `json:"namespace"`
	WorkloadKind string `json:"workloadKind,omitempty"`
	WorkloadName string `json:"workloadName,omitempty"`
	Pod          string `json:"pod,omitempty"`
}

func keyOf(m model.Metric) Key {
	return Key{
		Namespace: string(m[labelNamespace]), WorkloadKind: string(m[labelWorkloadKind]),
		WorkloadName: string(m[labelWorkloadName]), Pod: string(m[labelPod]),
	}
}

func (k Key) less(o Key) bool {
	a := [4]string{k.Namespace, k.WorkloadKind, k.WorkloadName, k.Pod}
	b := [4]string{o.Namespace, o.WorkloadKind, o.WorkloadName, o.Pod}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// Health says whether Prometheus answers and how many proxies it scrapes.
type Health struct {
	Version string `json:"version"`
	// ProxyTargets are the proxies Prometheus scrapes; ProxyTargetsUp,
	// those whose last scrape succeeded.
	ProxyTargets   int `json:"proxyTargets"`
	ProxyTargetsUp int `json:"proxyTargetsUp"`
}

// Health asks Prometheus for its version and its proxy targets; an
// error means it cannot be reached or does not answer as Prometheus.
func (c *Client) Health(ctx context.Context) (Health, error) {
	info, err := c.api.Buildinfo(ctx)
	if err != nil {
		return Health{}, fmt.Errorf("prometheus is not reachable: %w", err)
	}
	vs, err := c.vectors(ctx, qProxyTargets("count"), qProxyTargets("sum"))
	if err != nil {
		return Health{}, err
	}
	h := Health{Version: info.Version}
	for _, s := range vs[0] {
		h.ProxyTargets = int(value(s.Value))
	}
	for _, s := range vs[1] {
		h.ProxyTargetsUp = int(value(s.Value))
	}
	return h, nil
}

// Installed reports whether the viz extension's Prometheus Service
// exists (plexusctl viz install was applied).
func Installed(ctx context.Context, kube kubernetes.Interface) (bool, error) {
	_, err := kube.CoreV1().Services(Namespace).Get(ctx, PrometheusService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Service %s/%s: %w", Namespace, PrometheusService, err)
	}
	return true, nil
}

// vectors runs instant queries concurrently at c.Now() and returns their
// answers in order.
func (c *Client) vectors(ctx context.Context, queries ...string) ([]model.Vector, error) {
	at := c.Now()
	return concurrently[model.Vector](queries, "query", func(q string) (model.Value, error) {
		v, _, _, err := c.api.Query(ctx, q, at)
		return v, err
	})
}

// matrices runs range queries concurrently over r.
func (c *Client) matrices(ctx context.Context, r v1.Range, queries ...string) ([]model.Matrix, error) {
	return concurrently[model.Matrix](queries, "range query", func(q string) (model.Value, error) {
		v, _, _, err := c.api.QueryRange(ctx, q, r)
		return v, err
	})
}

// concurrently asks every query at once and returns the answers in
// order, each of type T.
func concurrently[T model.Value](queries []string, what string, ask func(string) (model.Value, error)) ([]T, error) {
	out := make([]T, len(queries))
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() {
			v, err := ask(q)
			if err != nil {
				errs[i] = fmt.Errorf("prometheus %s %s: %w", what, q, err)
				return
			}
			t, ok := v.(T)
			if !ok {
				errs[i] = fmt.Errorf("prometheus %s %s: answered a %s, want a %T", what, q, v.Type(), t)
				return
			}
			out[i] = t
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// value is v, with NaN and infinities (0/0, a quantile of nothing) as 0.
func value(v model.SampleValue) float64 {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// optional is v, or nil for NaN and infinities.
func optional(v model.SampleValue) *float64 {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

func sortedKeys[V any](m map[Key]V) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	return keys
}
