package podrules

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/addlog"
)

// AgentPodPath is where the node agent answers pod lookups on its pod
// socket: GET AgentPodPath + "<namespace>/<name>" returns the pod as the
// API server would (JSON, kind Pod) from the agent's informer cache, or
// 404 when the cache does not hold it.
const AgentPodPath = "/v1/pods/"

// agentLookupTimeout bounds the question to the node agent: it answers
// from memory on the same host in well under a millisecond, so anything
// slower is treated as a miss and the API GET takes over.
const agentLookupTimeout = 250 * time.Millisecond

// AgentPodGetter reads pods from the node agent's cache over its unix
// socket ("pod_socket" in the plugin config).
type AgentPodGetter struct {
	client *http.Client
}

// NewAgentPodGetter returns a getter that asks the agent on socket.
func NewAgentPodGetter(socket string, timeout time.Duration) *AgentPodGetter {
	dialer := net.Dialer{}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socket)
		},
		DisableCompression: true,
	}
	return &AgentPodGetter{client: &http.Client{Transport: tr, Timeout: timeout}}
}

// GetPod asks the agent once; a pod it does not hold is an *APIError with
// code 404.
func (g *AgentPodGetter) GetPod(ctx context.Context, namespace, name string) (*Pod, error) {
	if err := validPodName(namespace, name); err != nil {
		return nil, err
	}
	return fetchPod(ctx, g.client, "http://plexus-node"+AgentPodPath+namespace+"/"+name)
}

// FromAgent asks the node agent's cache for the pod the runtime named.
// It returns nil -- and the caller reads the pod from the API server --
// when there is no agent socket, the agent does not hold the pod, holds
// another incarnation of it (a different UID), or does not answer in time.
func FromAgent(ctx context.Context, log *slog.Logger, socket, namespace, name, uid string) *Pod {
	if socket == "" {
		return nil
	}
	start := time.Now()
	pod, err := NewAgentPodGetter(socket, agentLookupTimeout).GetPod(ctx, namespace, name)
	took := addlog.Millis(time.Since(start))
	switch {
	case err != nil:
		log.Debug("pod not from the node agent; asking the API server", "lookup_ms", took, "error", err)
		return nil
	case uid != "" && string(pod.UID) != uid:
		log.Debug("the node agent holds another incarnation of the pod; asking the API server", "lookup_ms", took, "agent_uid", pod.UID, "uid", uid)
		return nil
	}
	log.Debug("pod from the node agent", "lookup_ms", took)
	return pod
}
