package plugin

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
)

// fakeAgent serves pod lookups on a unix socket the way the node agent
// does (daemonset/podlookup, whose own tests pair it with the real
// getter): handle decides each answer.
func fakeAgent(t *testing.T, handle http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "pods.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handle}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func agentHolds(t *testing.T, pods ...*corev1.Pod) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for _, p := range pods {
			if r.URL.Path == podrules.AgentPodPath+p.Namespace+"/"+p.Name {
				p.Kind, p.APIVersion = "Pod", "v1"
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(p)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"kind":"Status","status":"Failure","reason":"NotFound","message":"not in the cache","code":404}`))
	}
}

func withUID(uid string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		withSidecar(p)
		p.UID = types.UID(uid)
	}
}

// TestAddAsksTheNodeAgentFirst: with "pod_socket" set, a pod the agent
// holds (same UID) is decided without any API call; anything else -- not
// in its cache, another incarnation, no agent listening, garbage, an
// agent that does not answer -- falls back to the one API GET, and the
// ADD still succeeds.
func TestAddAsksTheNodeAgentFirst(t *testing.T) {
	apiPod := pod("app", "web", nil, withUID("uid-new"))
	cases := []struct {
		name     string
		socket   func(t *testing.T) string
		wantGets int
	}{
		{"agent holds the pod", func(t *testing.T) string {
			return fakeAgent(t, agentHolds(t, pod("app", "web", nil, withUID("uid-new"))))
		}, 0},
		{"not in the agent's cache", func(t *testing.T) string { return fakeAgent(t, agentHolds(t)) }, 1},
		{"agent holds another incarnation", func(t *testing.T) string {
			return fakeAgent(t, agentHolds(t, pod("app", "web", nil, withUID("uid-old"))))
		}, 1},
		{"no agent listening", func(t *testing.T) string { return filepath.Join(t.TempDir(), "gone.sock") }, 1},
		{"agent answers garbage", func(t *testing.T) string {
			return fakeAgent(t, func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("\x00\xffnot json")) })
		}, 1},
		{"agent does not answer in time", func(t *testing.T) string {
			return fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			})
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, apiPod.DeepCopy())
			args := cmdArgs(stdin(t, "1.0.0", map[string]any{"pod_socket": tc.socket(t)}, fmt.Sprintf(prevResult100, "1.0.0", "")), "app", "web")
			args.Args += ";K8S_POD_UID=uid-new"
			start := time.Now()
			if err := h.p.Add(args); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("ADD took %s: the agent lookup is not bounded", took)
			}
			if len(h.tables.applied) != 1 {
				t.Errorf("rules applied %d times, want once", len(h.tables.applied))
			}
			if got := getCount(h.client); got != tc.wantGets {
				t.Errorf("API GETs = %d, want %d", got, tc.wantGets)
			}
		})
	}
}

func TestPodSocketMustBeAbsolute(t *testing.T) {
	conf, err := netconf.ParseConf(stdin(t, "1.0.0", map[string]any{"pod_socket": "run/pods.sock"}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.Validate(); err == nil {
		t.Fatal("a relative pod_socket was accepted")
	}
}
