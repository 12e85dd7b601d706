package mesh

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestZoneAware proves zone-aware balancing on real nodes in two zones:
// a client in one zone calls a zone-aware Service with two replicas in
// each; its requests stay in its zone at normal load, leave it within 5s
// when the local replicas slow down or fail, and come back when they
// recover; the client proxy's metrics count both, and the remote requests
// cross nodes over mTLS.
func TestZoneAware(t *testing.T) {
	c := clustertest.Connect(t)
	zoneOf := twoZones(t, c)
	env := clustercni.Read(t)
	env.Install(t)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	ns := c.Namespace(t, "zone", meshLabels)
	localZone := "zone-a"
	if !slices.Contains(slices.Collect(maps.Values(zoneOf)), localZone) {
		t.Fatalf("no ready node in %s: %v", localZone, zoneOf)
	}

	// Four replicas, two per zone (spread by the zone label), behind a
	// Service that asks for zone-aware balancing, with failure accrual so
	// that failing endpoints are ejected.
	books := podSpec("books", "serve", ":8080")
	books.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "books"}},
	}}
	deploy(t, c, ns, "books", 4, meshed, books)
	service(t, c, ns, "books", 8080)
	c.Kubectl(t, "-n", ns, "annotate", "service/books",
		balancerannotations.AnnotationZoneAware+"=true",
		balancerannotations.AnnotationFailureAccrual+"="+balancerannotations.AccrualConsecutive,
		balancerannotations.AnnotationMaxFailures+"=3")
	client := podSpec("client", "poll", "-interval=20ms", "http://books."+ns+".svc.cluster.local/")
	client.NodeSelector = map[string]string{corev1.LabelTopologyZone: localZone}
	deploy(t, c, ns, "client", 1, meshed, client)
	c.WaitDeploymentReady(t, ns, "books", 3*time.Minute)
	c.WaitDeploymentReady(t, ns, "client", 3*time.Minute)
	clientPod := pods(t, c, ns, "client")[0]

	// Which replicas are local, from their nodes' zones.
	local, remote := map[string]bool{}, map[string]bool{}
	for _, p := range pods(t, c, ns, "books") {
		if zoneOf[p.Spec.NodeName] == localZone {
			local[p.Name] = true
		} else {
			remote[p.Name] = true
		}
	}
	if len(local) != 2 || len(remote) != 2 {
		t.Fatalf("books replicas: local %v, remote %v; want two in each zone", local, remote)
	}
	t.Logf("client on %s (%s); local replicas %v, remote %v", clientPod.Spec.NodeName, localZone, slices.Sorted(maps.Keys(local)), slices.Sorted(maps.Keys(remote)))
	waitAnswers(t, c, ns, clientPod.Name, 20)
	// share is the fraction of the answers since t0 that came from hosts.
	share := func(lines []pollLine, hosts map[string]bool) (float64, int) {
		n, in := 0, 0
		for _, l := range lines {
			if host, ok := l.host(); ok {
				n++
				if hosts[host] {
					in++
				}
			}
		}
		if n == 0 {
			return 0, 0
		}
		return float64(in) / float64(n), n
	}
	// spillTime is how long after t0 five answers in a row first came
	// from hosts, or -1.
	spillTime := func(lines []pollLine, hosts map[string]bool, t0 time.Time) time.Duration {
		run := 0
		for _, l := range lines {
			host, ok := l.host()
			if !ok {
				continue
			}
			if hosts[host] {
				run++
			} else {
				run = 0
			}
			if run == 5 {
				return l.At.Sub(t0)
			}
		}
		return -1
	}
	setOnLocal := func(path string) {
		for name := range local {
			c.Kubectl(t, "-n", ns, "exec", name, "-c", "app", "--", "/testapp", "get", "http://127.0.0.1:8080"+path)
		}
	}

	// window returns the client's first n polls since t0 (50/s), waiting
	// for them.
	window := func(t *testing.T, t0 time.Time, n int) []pollLine {
		var lines []pollLine
		clustertest.WaitFor(t, time.Minute, itoa(n)+" polls", func(context.Context) (bool, error) {
			lines = since(pollLog(t, c, ns, clientPod.Name), t0)
			return len(lines) >= n, nil
		})
		return lines
	}

	t.Run("normal load stays in the zone", func(t *testing.T) {
		before := proxyMetrics(t, c, ns, clientPod.Name)
		lines := window(t, time.Now(), 500) // 10 s at 50/s
		f, n := share(lines, local)
		hosts, errs := servedBy(lines)
		if n < 100 || f < 0.95 || len(errs) > 0 {
			t.Fatalf("in %d polls, %d answers, %.1f %% from the local zone (%v), %d failed (%.200q); want ≥ 95 %% local and none failed", len(lines), n, 100*f, hosts, len(errs), errs)
		}
		after := proxyMetrics(t, c, ns, clientPod.Name)
		dl := sumSeries(t, after, "outbound_http_balancer_zone_requests_total", `zone_locality="local"`) - sumSeries(t, before, "outbound_http_balancer_zone_requests_total", `zone_locality="local"`)
		dr := sumSeries(t, after, "outbound_http_balancer_zone_requests_total", `zone_locality="remote"`) - sumSeries(t, before, "outbound_http_balancer_zone_requests_total", `zone_locality="remote"`)
		// The last answer may be logged by the client before its proxy
		// counts it (a three-node run: 502 of 503): one in flight.
		if dl < float64(n)*0.9 || dl+dr < float64(n-1) {
			t.Errorf("the client proxy counted %v local and %v remote requests over a window with %d answers, %.1f %% local", dl, dr, n, 100*f)
		}
		// How the local requests spread over the local replicas is peak
		// EWMA's affair, as without zones: one request at a time, the
		// replica first measured can take them all until the estimates
		// decay to the real RTTs (about 30s after the set is created).
		t.Logf("%d answers in %d polls, %.1f %% local (%v); metrics: +%v local, +%v remote", n, len(lines), 100*f, hosts, dl, dr)
	})

	// breakLocal breaks the local replicas with the testapp control path
	// brk, requires the traffic to leave the zone within 5s, mends them
	// with fix and waits (up to 90s: a slow estimate decays with τ = 10s
	// before the local replicas win again) for the traffic to come back.
	// It returns the 400 polls (8 s) after the break.
	breakLocal := func(t *testing.T, brk, fix string) []pollLine {
		t0 := time.Now()
		setOnLocal(brk)
		lines := window(t, t0, 400) // 8 s at 50/s
		spill := spillTime(lines, remote, t0)
		if hosts, errs := servedBy(lines); spill < 0 || spill > 5*time.Second {
			t.Fatalf("after %s on the local replicas, traffic did not go to the other zone within 5s (spilled after %v; answers %v, %d failed)", brk, spill, hosts, len(errs))
		}
		t1 := time.Now()
		setOnLocal(fix)
		var back time.Duration
		clustertest.WaitFor(t, 90*time.Second, "traffic back in the zone", func(context.Context) (bool, error) {
			back = spillTime(since(pollLog(t, c, ns, clientPod.Name), t1), local, t1)
			return back >= 0, nil
		})
		t.Logf("%s: traffic left the zone %v after; %s: it came back %v after", brk, spill.Round(10*time.Millisecond), fix, back.Round(10*time.Millisecond))
		return lines
	}

	t.Run("slow local replicas: traffic spills within 5s and returns", func(t *testing.T) {
		breakLocal(t, "/testapp/delay?ms=100", "/testapp/delay?ms=0")
	})

	t.Run("failing local replicas: traffic spills within 5s and returns", func(t *testing.T) {
		_, errs := servedBy(breakLocal(t, "/testapp/fail?status=503", "/testapp/fail?status=0"))
		// Each local replica fails 3 times in a row before it is ejected,
		// then once per probe (penalties of about 1, 2 and 4s: three
		// probes in 8s): 2 × (3 + 3), and a margin for the jitter.
		if len(errs) > 16 {
			t.Errorf("%d requests failed in the 400 polls (8 s) after the local replicas broke; want those that ejected them and their probes (≤ 16)", len(errs))
		}
		t.Logf("%d requests failed while the local replicas were ejected", len(errs))
	})

	t.Run("requests that leave the zone cross nodes over mTLS", func(t *testing.T) {
		m := proxyMetrics(t, c, ns, clientPod.Name)
		for name := range remote {
			p, err := c.Client.CoreV1().Pods(ns).Get(clustertest.Context(t, 10*time.Second), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName == clientPod.Spec.NodeName {
				t.Fatalf("remote replica %s is on the client's node %s", name, p.Spec.NodeName)
			}
		}
		if v := sumSeries(t, m, "request_total", `direction="outbound"`, `tls="true"`, `server_id="spiffe://`+trustDomain+`/ns/`+ns+`/sa/books"`); v == 0 {
			t.Errorf("the client proxy counted no mTLS requests to books")
		}
		if v := sumSeries(t, m, "request_total", `direction="outbound"`, `tls="false"`); v != 0 {
			t.Errorf("the client proxy counted %v plaintext outbound requests", v)
		}
	})
}

// readyNodeZones is the zone label of each ready node that has one.
func readyNodeZones(t *testing.T, c *clustertest.Cluster) map[string]string {
	t.Helper()
	nodes, err := c.Client.CoreV1().Nodes().List(clustertest.Context(t, 30*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	for _, n := range nodes.Items {
		zone := n.Labels[corev1.LabelTopologyZone]
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && zone != "" {
				zoneOf[n.Name] = zone
			}
		}
	}
	return zoneOf
}
