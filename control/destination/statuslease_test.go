package destination

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// statusReplica is a destination replica TestRouteStatusOneWriter runs.
type statusReplica struct {
	name string
	reg  *prometheus.Registry
	stop func() // cancels Run and waits for it (the Lease is released)
}

// replica runs a Server with cfg on c's clientsets until stop or the end
// of the test.
func (c *routeCluster) replica(t *testing.T, name string, cfg Config) *statusReplica {
	t.Helper()
	r := &statusReplica{name: name, reg: prometheus.NewRegistry()}
	srv, err := New(cfg, c.core, r.reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WatchRoutes(RouteClients{Gateway: c.gw, Dynamic: c.dyn, Discovery: c.core.Discovery()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: Run: %v", name, err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// metric sums the series of the named metric whose labels include
// label=value (label "": every series).
func (r *statusReplica) metric(name, label, value string) float64 {
	mfs, _ := r.reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func (r *statusReplica) leading() bool {
	return r.metric("plexus_destination_status_leader", "", "") == 1
}
func (r *statusReplica) writes() float64 {
	return r.metric("plexus_destination_status_writes_total", "result", "ok")
}

// TestRouteStatusOneWriter: of two replicas that elect the status writer
// through a Lease, one writes route status and the other writes nothing;
// when the writer stops, it releases the Lease, the other takes over and
// writes what changed since.
func TestRouteStatusOneWriter(t *testing.T) {
	c := fakeCluster(t, true, routeFixture()...)
	config := func(identity string) Config {
		cfg := DefaultConfig()
		cfg.StatusLease = StatusLease{Namespace: "plexus-system", Name: DefaultStatusLease, Identity: identity,
			Duration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
		return cfg
	}
	a, b := c.replica(t, "a", config("a")), c.replica(t, "b", config("b"))
	var leader, follower *statusReplica
	eventually.Within(t, 10*time.Second, "one replica to lead", func() bool {
		switch la, lb := a.leading(), b.leading(); {
		case la && !lb:
			leader, follower = a, b
		case lb && !la:
			leader, follower = b, a
		}
		return leader != nil
	})
	if a.leading() && b.leading() {
		t.Fatal("both replicas lead")
	}

	ctx := context.Background()
	if _, err := c.httpRoutes("ns").Create(ctx, httpRoute("ns", "split", "", "web=90", "ghost=10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "ns", "split", "Accepted=True/Accepted",
		"ResolvedRefs=False/BackendNotFound: rules[0].backendRefs[1]: Service ns/ghost not found")
	if leader.writes() == 0 || follower.writes() != 0 {
		t.Errorf("status writes: leader %s %v, follower %s %v; want the leader's only", leader.name, leader.writes(), follower.name, follower.writes())
	}
	if n := c.statusWrites(); n != 1 {
		t.Errorf("%d status writes reached the API server, want 1", n)
	}

	leader.stop()
	// Released on the way out, not left to expire: the follower takes
	// over within a few retry periods, far sooner than the 3 s lease.
	l, err := c.core.CoordinationV1().Leases("plexus-system").Get(ctx, DefaultStatusLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == leader.name || leader.leading() {
		t.Fatalf("lease %+v (%v) right after its holder %s stopped (leading: %v): want it released", l.Spec, err, leader.name, leader.leading())
	}
	eventually.Within(t, time.Second, "the follower to lead once the leader released the lease", follower.leading)
	l, err = c.core.CoordinationV1().Leases("plexus-system").Get(ctx, DefaultStatusLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != follower.name {
		t.Fatalf("lease %+v (%v): want held by %s", l, err, follower.name)
	}
	ghost := service("ns", "ghost", "10.96.0.13", svcPort("http", 80, intstr.FromInt32(8080)))
	if _, err := c.core.CoreV1().Services("ns").Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "ns", "split", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")
	if follower.writes() == 0 {
		t.Errorf("the new leader %s wrote no status", follower.name)
	}
}

func TestStatusLeaseValidate(t *testing.T) {
	for _, c := range []struct {
		l  StatusLease
		ok bool
	}{
		{StatusLease{}, true},
		{StatusLease{Name: "x", Namespace: "ns", Identity: "pod"}, true},
		{StatusLease{Name: "x", Identity: "pod"}, false},
		{StatusLease{Name: "x", Namespace: "ns"}, false},
		{StatusLease{Name: "x", Namespace: "ns", Identity: "pod", Duration: 5 * time.Second}, false}, // renew 10s ≥ duration
	} {
		if err := c.l.validate(); (err == nil) != c.ok {
			t.Errorf("%+v: validate = %v, want ok %v", c.l, err, c.ok)
		}
	}
}
