package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/plexus-mesh/plexus/cni-plugin/kubeconfig"
	"github.com/plexus-mesh/plexus/control/meshpod"
)

// ProxyContainerName is the sidecar that marks a pod as meshed.
const ProxyContainerName = meshpod.ProxyContainerName

// PodGetter reads one pod.
type PodGetter interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// HTTPPodGetter reads a pod with one plain HTTP GET and decodes it with
// k8s.io/api's generated protobuf code. It does without client-go on
// purpose: client-go's package init, kubeconfig loading and transport
// layers cost several milliseconds of CPU in every CNI call, for one
// request. Failures are client-go's: *apierrors.StatusError for an API
// error, the *url.Error of net/http for a network one.
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

// maxPodBytes bounds the response read; etcd stores objects up to 1.5 MiB.
const maxPodBytes = 4 << 20

// Content types the API server speaks; protobuf is the cheaper to decode.
const (
	contentProtobuf = "application/vnd.kubernetes.protobuf"
	contentJSON     = "application/json"
)

// protobufMagic starts every protobuf-encoded API object.
var protobufMagic = []byte("k8s\x00")

// GetPod performs one GET, with no retries of its own.
func (g *HTTPPodGetter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	for _, seg := range []string{namespace, name} {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/%") {
			return nil, fmt.Errorf("invalid pod namespace/name %q/%q", namespace, name)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.Config.URL("/api/v1/namespaces/"+namespace+"/pods/"+name), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", contentProtobuf+", "+contentJSON)
	req.Header.Set("User-Agent", "plexus-cni")
	resp, err := g.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPodBytes))
	if err != nil {
		return nil, fmt.Errorf("reading the API server's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, responseError(resp, body, name)
	}
	pod := &corev1.Pod{}
	if err := decode(resp.Header.Get("Content-Type"), body, pod); err != nil {
		return nil, fmt.Errorf("decoding pod %s/%s: %w", namespace, name, err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("GET pod %s/%s returned a %s", namespace, name, pod.Kind)
	}
	return pod, nil
}

// protoMessage is a generated k8s.io/api type.
type protoMessage interface{ Unmarshal([]byte) error }

// decode reads a Pod or Status as the API server encoded it.
func decode(contentType string, body []byte, into interface {
	protoMessage
	GetObjectKind() schema.ObjectKind
}) error {
	mediaType, _, _ := mime.ParseMediaType(contentType)
	switch mediaType {
	case contentProtobuf:
		if !bytes.HasPrefix(body, protobufMagic) {
			return errors.New("protobuf answer without the k8s magic number")
		}
		var unk runtime.Unknown
		if err := unk.Unmarshal(body[len(protobufMagic):]); err != nil {
			return err
		}
		if err := into.Unmarshal(unk.Raw); err != nil {
			return fmt.Errorf("%s: %w", unk.Kind, err)
		}
		into.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(unk.APIVersion, unk.Kind))
		return nil
	case contentJSON:
		return json.Unmarshal(body, into)
	}
	return fmt.Errorf("unexpected content type %q", contentType)
}

// responseError turns a failed response into the error client-go would
// return: the server's Status when it sent one, else a generic error
// for the HTTP status code.
func responseError(resp *http.Response, body []byte, name string) error {
	var st metav1.Status
	if decode(resp.Header.Get("Content-Type"), body, &st) == nil && st.Status == metav1.StatusFailure {
		return &apierrors.StatusError{ErrStatus: st}
	}
	msg := "unknown"
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/") || ct == "" {
		msg = strings.TrimSpace(string(body))
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{Resource: "pods"}, name, msg, 0, true)
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

// getPod performs the pod GET, retrying only errors that may pass.
func getPod(ctx context.Context, g PodGetter, r Retry, namespace, name string) (*corev1.Pod, error) {
	backoff := r.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.PerAttempt)
		var pod *corev1.Pod
		pod, err = g.GetPod(actx, namespace, name)
		cancel()
		if err == nil {
			return pod, nil
		}
		if attempt >= r.Attempts || !transient(err) || ctx.Err() != nil {
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

// transient reports whether a failed GET may succeed when repeated.
func transient(err error) bool {
	switch {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}
