package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/plexus-mesh/plexus/control/meshpod"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ProxyContainerName is the sidecar that marks a pod as meshed.
const ProxyContainerName = meshpod.ProxyContainerName

// PodGetter reads one pod.
type PodGetter interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// RESTPodGetter reads pods with a bare core/v1 REST client. It avoids the
// generated clientset on purpose: that registers every API group at process
// start, which costs several milliseconds on every CNI call.
type RESTPodGetter struct {
	Client rest.Interface
}

// GetPod performs one GET. client-go's own Retry-After retries are off:
// the caller's bounded retry is the only loop.
func (g RESTPodGetter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := g.Client.Get().MaxRetries(0).Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(pod)
	if err != nil {
		return nil, err
	}
	return pod, nil
}

// NewKubeconfigPodGetter builds a getter from a kubeconfig file. Client-side
// rate limiting is off (one request per process) and protobuf is used.
func NewKubeconfigPodGetter(kubeconfig string, timeout time.Duration) (PodGetter, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering core/v1: %w", err)
	}
	cfg.Timeout = timeout
	cfg.QPS = -1
	cfg.UserAgent = "plexus-cni"
	// One request per process: HTTP/1.1 avoids the HTTP/2 connection preface.
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building client from kubeconfig %s: %w", kubeconfig, err)
	}
	return RESTPodGetter{Client: client}, nil
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
