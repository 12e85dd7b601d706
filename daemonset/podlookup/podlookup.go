// Package podlookup answers plexus-cni's pod lookups from the node agent's
// informer cache of the pods bound to its node, over a unix stream socket
// in the agent's root-only state dir. An ADD then costs no TLS handshake
// and no API round trip when the agent holds the pod -- which it almost
// always does: the kubelet learns of the pod from the same API server
// before it asks the runtime for the pod's sandbox. A pod the cache does
// not hold is a 404, and the plugin reads it from the API server.
package podlookup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/sockfile"
)

// Metrics count the lookups by result: hit (answered from the cache),
// miss (not in the cache: the plugin asks the API server), invalid (a
// request that is not a pod lookup).
type Metrics struct {
	Lookups *prometheus.CounterVec
}

// NewMetrics registers the lookup metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Lookups: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_pod_lookups_total", Help: "Pod lookups of plexus-cni answered by the agent, by result (hit, miss, invalid)."}, []string{"result"})}
	for _, r := range []string{"hit", "miss", "invalid"} {
		m.Lookups.WithLabelValues(r)
	}
	return m
}

// Handler serves GET plugin.AgentPodPath + "<namespace>/<name>" from pods:
// the pod as the API server would send it, or a NotFound Status when the
// cache does not hold it (also while the cache is still syncing).
func Handler(pods listersv1.PodLister, m *Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name, ok := splitPodPath(r.URL.Path)
		if r.Method != http.MethodGet || !ok {
			m.Lookups.WithLabelValues("invalid").Inc()
			writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("want GET %s<namespace>/<name>, got %s %s", podrules.AgentPodPath, r.Method, r.URL.Path))
			return
		}
		pod, err := pods.Pods(ns).Get(name)
		if apierrors.IsNotFound(err) {
			m.Lookups.WithLabelValues("miss").Inc()
			writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("pod %s/%s is not in the node agent's cache", ns, name))
			return
		}
		if err != nil {
			m.Lookups.WithLabelValues("miss").Inc()
			writeStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		m.Lookups.WithLabelValues("hit").Inc()
		w.Header().Set("Content-Type", "application/json")
		// Informer objects carry no TypeMeta; the plugin checks the kind.
		json.NewEncoder(w).Encode(struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			*corev1.Pod
		}{"v1", "Pod", pod})
	})
}

// splitPodPath reads "<AgentPodPath><namespace>/<name>".
func splitPodPath(path string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(path, podrules.AgentPodPath)
	if !found {
		return "", "", false
	}
	ns, name, found = strings.Cut(rest, "/")
	return ns, name, found && ns != "" && name != "" && !strings.Contains(name, "/")
}

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "v1", "kind": "Status", "status": "Failure",
		"reason": reason, "message": message, "code": code,
	})
}

// Listen binds a unix stream socket at path with mode 0600, replacing a
// socket a previous agent left; any other file there is an error.
func Listen(path string) (net.Listener, error) {
	if err := sockfile.Clear(path); err != nil {
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	return l, nil
}

// Serve answers lookups on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
