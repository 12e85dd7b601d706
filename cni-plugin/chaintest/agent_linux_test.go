package chaintest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/plexus-mesh/plexus/daemonset/podlookup"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// agentLookups is the node agent's pod lookup service, run in the test:
// its real handler over a real informer on the test namespace's pods.
type agentLookups struct {
	lister  listersv1.PodLister
	metrics *podlookup.Metrics
}

// serveAgentLookups starts the service on a socket in a temp dir and
// names that socket in plexus-cni's config, as the agent does.
func (e *env) serveAgentLookups(t testing.TB) *agentLookups {
	t.Helper()
	m := podlookup.NewMetrics(prometheus.NewRegistry())
	factory := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, informers.WithNamespace(e.namespace))
	a := &agentLookups{lister: factory.Core().V1().Pods().Lister(), metrics: m}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	sock := filepath.Join(t.TempDir(), "pods.sock")
	l, err := podlookup.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- podlookup.Serve(ctx, l, podlookup.Handler(a.lister, m)) }()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})

	var conf map[string]any
	if err := json.Unmarshal(e.plexus, &conf); err != nil {
		t.Fatal(err)
	}
	conf["pod_socket"] = sock
	if e.plexus, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return a
}

// waitFor waits until the informer holds every named pod.
func (a *agentLookups) waitFor(t testing.TB, names []string) {
	t.Helper()
	missing := 0
	if !eventually.Holds(30*time.Second, func() bool {
		pods, err := a.lister.List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]bool{}
		for _, p := range pods {
			held[p.Name] = true
		}
		missing = 0
		for _, n := range names {
			if !held[n] {
				missing++
			}
		}
		return missing == 0
	}) {
		t.Fatalf("the agent's informer still lacks %d of %d pods", missing, len(names))
	}
}

func (a *agentLookups) hits() float64 {
	return testutil.ToFloat64(a.metrics.Lookups.WithLabelValues("hit"))
}
