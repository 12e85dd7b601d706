package podrules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/kubeconfig"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// ProxyContainerName is the sidecar that marks a pod as meshed.
const ProxyContainerName = podcontract.ProxyContainerName

// Pod is what plexus-cni reads of a pod, decoded from the API server's
// JSON; every other field is skipped. Names follow k8s.io/api/core/v1
// (pod.UID, pod.Annotations, pod.Spec.InitContainers). The plugin does
// without that package on purpose: its init and apimachinery's cost
// milliseconds of CPU in every CNI call.
type Pod struct {
	ObjectMeta `json:"metadata"`
	Spec       PodSpec `json:"spec"`
}

// ObjectMeta is the part of a pod's metadata the plugin uses.
type ObjectMeta struct {
	Namespace   string            `json:"namespace,omitempty"`
	Name        string            `json:"name,omitempty"`
	UID         string            `json:"uid,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodSpec lists the pod's containers.
type PodSpec struct {
	InitContainers []Container `json:"initContainers,omitempty"`
	Containers     []Container `json:"containers,omitempty"`
}

// Container is a container's name, for an init container its restart
// policy ("Always" makes it a native sidecar), and its literal environment
// (where the injector records the proxy's admitted settings).
type Container struct {
	Name          string   `json:"name"`
	RestartPolicy string   `json:"restartPolicy,omitempty"`
	Env           []EnvVar `json:"env,omitempty"`
}

// EnvVar is a container's environment variable; one taken from elsewhere
// (valueFrom) has an empty Value here.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// isMeshed applies podcontract.RunsProxy to a Pod (meshpod.IsMeshed does
// the same for a corev1.Pod; a test holds the two equal).
func isMeshed(p *Pod) bool {
	if p == nil {
		return false
	}
	plain := func(c Container) bool { return podcontract.RunsProxy(c.Name, false, false) }
	sidecar := func(c Container) bool { return podcontract.RunsProxy(c.Name, true, c.RestartPolicy == "Always") }
	return slices.ContainsFunc(p.Spec.Containers, plain) || slices.ContainsFunc(p.Spec.InitContainers, sidecar)
}

// proxyContainer returns the pod's plexus-proxy container, nil if it has
// none (names are unique among a pod's containers and init containers).
func proxyContainer(p *Pod) *Container {
	for _, cs := range [][]Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == ProxyContainerName {
				return &cs[i]
			}
		}
	}
	return nil
}

// redirectAnnotations returns the annotations a meshed pod's redirect is
// built from: those the injector recorded in the proxy's environment at
// admission (podcontract.EnvAdmitted; the environment, unlike annotations,
// cannot change after creation), or, for a pod injected before that
// variable existed, its current annotations. As the kubelet does, the last
// of repeated variables counts.
func redirectAnnotations(p *Pod) (map[string]string, error) {
	c := proxyContainer(p)
	if c == nil {
		return p.Annotations, nil
	}
	for i := len(c.Env) - 1; i >= 0; i-- {
		if c.Env[i].Name == podcontract.EnvAdmitted {
			a, err := podcontract.DecodeAdmitted(c.Env[i].Value)
			if err != nil {
				return nil, fmt.Errorf("container %s: %w", ProxyContainerName, err)
			}
			return a, nil
		}
	}
	return p.Annotations, nil
}

// inboundSource returns the addresses a meshed pod's proxy dials its
// application from (podcontract.EnvInboundSource, a literal the injector
// sets), nil for a proxy that does not bind them (injected before the
// variable existed, or no proxy container). As the kubelet does, the last
// of repeated variables counts.
func inboundSource(p *Pod) ([]netip.Addr, error) {
	c := proxyContainer(p)
	if c == nil {
		return nil, nil
	}
	for i := len(c.Env) - 1; i >= 0; i-- {
		if c.Env[i].Name == podcontract.EnvInboundSource {
			a, err := podcontract.ParseInboundSource(c.Env[i].Value)
			if err != nil {
				return nil, fmt.Errorf("container %s: %w", ProxyContainerName, err)
			}
			return a, nil
		}
	}
	return nil, nil
}

// PodGetter reads one pod.
type PodGetter interface {
	GetPod(ctx context.Context, namespace, name string) (*Pod, error)
}

// APIError is a request the API server answered with an error: the HTTP
// status code and, when it sent a Status object, its reason and message.
type APIError struct {
	Code    int
	Reason  string // e.g. "NotFound", "Forbidden"; empty without a Status
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("the API server answered %d %s", e.Code, http.StatusText(e.Code))
}

// HTTPPodGetter reads a pod with one plain HTTP GET. It does without
// client-go on purpose: client-go's package init, kubeconfig loading and
// transport layers cost milliseconds of CPU in every CNI call, for one
// request. Failures are an *APIError when the server answered, else the
// *url.Error of net/http.
type HTTPPodGetter struct {
	Config *kubeconfig.Config
	Client *http.Client
}

// NewKubeconfigPodGetter builds a getter from a kubeconfig file; each GET
// gives up after timeout.
func NewKubeconfigPodGetter(path string, timeout time.Duration) (PodGetter, error) {
	kc, err := kubeconfig.Load(path)
	if err != nil {
		return nil, err
	}
	return &HTTPPodGetter{Config: kc, Client: kc.Client(timeout)}, nil
}

// maxPodBytes bounds the answer read; etcd stores objects up to 1.5 MiB.
const maxPodBytes = 4 << 20

// GetPod performs one GET, with no retries of its own.
func (g *HTTPPodGetter) GetPod(ctx context.Context, namespace, name string) (*Pod, error) {
	if err := validPodName(namespace, name); err != nil {
		return nil, err
	}
	return fetchPod(ctx, g.Client, g.Config.URL("/api/v1/namespaces/"+namespace+"/pods/"+name))
}

// validPodName refuses a namespace or name that would change the URL path.
func validPodName(namespace, name string) error {
	for _, seg := range []string{namespace, name} {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/%?#") {
			return fmt.Errorf("invalid pod namespace/name %q/%q", namespace, name)
		}
	}
	return nil
}

// fetchPod GETs url and decodes the pod it answers with; any other answer
// is an *APIError.
func fetchPod(ctx context.Context, client *http.Client, url string) (*Pod, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "plexus-cni")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPodBytes))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, ResponseError(resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return DecodePod(resp.Header.Get("Content-Type"), body)
}

// DecodePod reads the JSON of a pod.
func DecodePod(contentType string, body []byte) (*Pod, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt != "application/json" {
		return nil, fmt.Errorf("the API server answered with %q, not JSON", contentType)
	}
	var obj struct {
		Kind string `json:"kind"`
		Pod
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("decoding the pod: %w", err)
	}
	if obj.Kind != "Pod" {
		return nil, fmt.Errorf("the API server answered with a %q, not a Pod", obj.Kind)
	}
	return &obj.Pod, nil
}

// ResponseError reads a failed answer as client-go would: the server's
// Status (reason and message) when it sent one, else the status code and,
// for a text answer, the text.
func ResponseError(code int, contentType string, body []byte) *APIError {
	var st struct {
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/json" && json.Unmarshal(body, &st) == nil && st.Status == "Failure" {
		e := &APIError{Code: st.Code, Reason: st.Reason, Message: st.Message}
		if e.Code == 0 {
			e.Code = code
		}
		return e
	}
	e := &APIError{Code: code}
	if strings.HasPrefix(mt, "text/") {
		const max = 512
		if text := strings.TrimSpace(string(body)); text != "" {
			e.Message = fmt.Sprintf("the API server answered %d %s: %s", code, http.StatusText(code), text[:min(len(text), max)])
		}
	}
	return e
}

// Retry bounds the pod lookup.
type Retry struct {
	Attempts   int           // total tries, at least 1
	PerAttempt time.Duration // timeout of each try
	Backoff    time.Duration // wait before the second try; doubled each time
}

// Validate checks r.
func (r Retry) Validate() error {
	if r.Attempts < 1 || r.PerAttempt <= 0 || r.Backoff < 0 {
		return fmt.Errorf("invalid retry policy %+v", r)
	}
	return nil
}

// DefaultRetry is at most 3 tries of 2 s each, 6.6 s in the worst case.
func DefaultRetry() Retry {
	return Retry{Attempts: 3, PerAttempt: 2 * time.Second, Backoff: 200 * time.Millisecond}
}

// GetPod performs the pod GET, retrying only errors that may pass.
func GetPod(ctx context.Context, g PodGetter, r Retry, namespace, name string) (*Pod, error) {
	backoff := r.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.PerAttempt)
		var pod *Pod
		pod, err = g.GetPod(actx, namespace, name)
		cancel()
		if err == nil {
			return pod, nil
		}
		if attempt >= r.Attempts || !Transient(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("GET pod %s/%s (attempt %d of %d): %w", namespace, name, attempt, r.Attempts, err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("GET pod %s/%s: %w (last error: %w)", namespace, name, ctx.Err(), err)
		}
		backoff *= 2
	}
}

// transientReasons and transientCodes are the API answers that may pass:
// what client-go's apierrors.IsTimeout, IsServerTimeout, IsTooManyRequests,
// IsServiceUnavailable and IsInternalError accept.
var (
	transientReasons = []string{"Timeout", "ServerTimeout", "TooManyRequests", "ServiceUnavailable", "InternalError"}
	transientCodes   = []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
)

// Transient reports whether a failed GET may succeed when repeated:
// the answers above, timeouts and network errors.
func Transient(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return slices.Contains(transientReasons, apiErr.Reason) || slices.Contains(transientCodes, apiErr.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}
