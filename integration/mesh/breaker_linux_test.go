package mesh

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestBreaker proves failure accrual (circuit breaking) and the queue in
// front of a Service without endpoints (ARCHITECTURE.md §8) on the real
// cluster, from a meshed client whose requests (testapp load, run in the
// client pod) go through its proxy.
//
// Service accrual turns failure accrual on over the three replicas of
// backend (max-failures 5, penalty 1s to 4s, jitter 0.5, floor 50 %);
// Service plain selects the same replicas without it. The test breaks and
// fixes a replica at run time (testapp's /testapp/fail) and reads which
// requests each replica received, and when (/testapp/received), straight
// from the test process at the pod's IP: the node reaches every pod and
// the pod's proxy lets plaintext from it in. The cluster has one node, so
// the pods' clocks are the test's.
//
//   - circuit breaking: with one replica answering 500, under 2 % of the
//     requests reach it after the first second; it then receives one
//     request at a time (a probe), about a penalty apart (1s, 2s, 4s, 4s
//     within the jitter); fixed, it answers again within one max penalty
//     and then takes requests again. The control, in the same run:
//     through plain it answers a real share (5 % or more, and five times
//     its share with accrual).
//   - floor: with all three answering 500, every request reaches a server
//     (its 500 is relayed) and none is answered by the proxy.
//   - fail-fast: Service gap, without a selector or endpoints, answers
//     503 no-endpoints after about 3 s, then at once, until an
//     EndpointSlice the test writes gives it a replica.
//   - queue: requests sent while gap's EndpointSlice is gone for 1 s all
//     succeed once it is back; of 150 requests at once to Service full
//     (no endpoints ever) 100 wait and are answered no-endpoints, 50 are
//     answered queue-full at once.
func TestBreaker(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Install(t)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	b := deployBreaker(t, c)

	t.Run("circuit breaking: a replica answering 500 gets under 2% after 1s, is probed at 1s, 2s, 4s, 4s and rejoins once fixed", b.circuitBreaking)
	t.Run("floor: with every replica answering 500 the client gets their 500s, never a proxy's answer", b.floor)
	t.Run("fail-fast: no endpoints is 503 no-endpoints after 3s, then at once until an endpoint appears", b.failFast)
	t.Run("queue: requests sent during a 1s gap in endpoints are all answered 200", b.gap)
	t.Run("queue: 100 requests wait for an endpoint, more are answered 503 queue-full at once", b.queueFull)
}

// The failure accrual of Service accrual: short penalties keep the test
// short.
const (
	accrualMaxFailures = 5
	accrualMinPenalty  = time.Second
	accrualMaxPenalty  = 4 * time.Second
	accrualJitter      = 0.5
	// probeSlack is how long after its penalty a probe may come: the next
	// request the balancer gives the endpoint (at 100 req/s, one every 10 ms).
	probeSlack = 500 * time.Millisecond
)

var accrualAnnotations = map[string]string{
	"balancer.plexus.dev/failure-accrual":                          "consecutive",
	"balancer.plexus.dev/failure-accrual-consecutive-max-failures": strconv.Itoa(accrualMaxFailures),
	"balancer.plexus.dev/failure-accrual-consecutive-min-penalty":  accrualMinPenalty.String(),
	"balancer.plexus.dev/failure-accrual-consecutive-max-penalty":  accrualMaxPenalty.String(),
	"balancer.plexus.dev/failure-accrual-consecutive-jitter-ratio": strconv.FormatFloat(accrualJitter, 'g', -1, 64),
	"balancer.plexus.dev/min-healthy-percent":                      "50",
}

// breakerTest is what TestBreaker deployed.
type breakerTest struct {
	*routesTest              // the namespace and the client pod
	backends    []corev1.Pod // the three replicas of backend, by name
	favoured    corev1.Pod   // of them, the one the client estimated fastest (settled)
}

// deployBreaker deploys the client, backend and the Services into a
// restricted, injected namespace and waits until the client reaches all
// three replicas through accrual and plain, and the test reaches each.
func deployBreaker(t *testing.T, c *clustertest.Cluster) *breakerTest {
	t.Helper()
	ns := c.Namespace(t, "breaker", map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "plexus.dev/inject": "enabled"})
	b := &breakerTest{routesTest: &routesTest{c: c, ns: ns}}
	deploy(t, c, ns, "client", 1, meshed, restricted(podSpec("client", "serve", ":8080"))) // idle: the tests exec testapp load in it
	deploy(t, c, ns, "backend", 3, meshed, restricted(podSpec("backend", "serve", ":8080")))
	b.service(t, "accrual", "backend", 8080, "", accrualAnnotations)
	b.service(t, "plain", "backend", 8080, "", nil)
	b.selectorless(t, "gap")
	b.selectorless(t, "full")
	for _, d := range []string{"client", "backend"} {
		c.WaitDeploymentReady(t, ns, d, 3*time.Minute)
	}
	b.client = pods(t, c, ns, "client")[0].Name
	b.backends = pods(t, c, ns, "backend")
	if len(b.backends) != 3 {
		t.Fatalf("%d running replicas of backend, want 3", len(b.backends))
	}
	slices.SortFunc(b.backends, func(x, y corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	for _, svc := range []string{"accrual", "plain"} {
		clustertest.WaitFor(t, time.Minute, "the client to reach the three replicas through "+svc, func(ctx context.Context) (bool, error) {
			res, err := b.tryLoad(ctx, "-n", "30", "-c", "3", b.url(svc, "/warm-up"))
			return err == nil && res.Statuses["200"] == 30 && len(res.Servers) == 3, err
		})
	}
	for _, p := range b.backends {
		receivedAt(t, p, "/warm-up") // the test reaches the pod
	}
	b.favoured = b.settled(t)
	return b
}

// settled waits until the client's proxy estimates the three replicas
// alike through both Services. A slow first answer in the warm-up (a
// replica's proxy fetching its policy, on a busy node) is a peak that
// keeps that replica out of most picks for seconds (peak EWMA decays with
// τ = 10s); the control below, which wants each replica near a third of
// the requests, would then measure the warm-up (a CI run: 17 %). It
// returns the replica the client estimates fastest through plain: on
// three nodes the replicas answer at different speeds (the client's own
// node is faster), and peak-EWMA gives the fastest the most requests.
func (b *breakerTest) settled(t *testing.T) corev1.Pod {
	t.Helper()
	var last map[string]map[string]float64
	clustertest.WaitFor(t, time.Minute, "the client's estimates of the replicas to settle", func(ctx context.Context) (bool, error) {
		ewmas, err := proxyEWMAs(ctx, b.c, b.ns, b.client)
		if err != nil {
			return false, err
		}
		last = ewmas
		for _, svc := range []string{"accrual", "plain"} {
			if len(ewmas[svc]) != 3 {
				return false, nil
			}
			lo, hi := math.Inf(1), 0.0
			for _, ms := range ewmas[svc] {
				lo, hi = min(lo, ms), max(hi, ms)
			}
			if hi > 2*lo+1 {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("the client's estimates (ms) once settled: %v", last)
	fastest := b.backends[0]
	for _, p := range b.backends {
		if last["plain"][p.Status.PodIP+":8080"] < last["plain"][fastest.Status.PodIP+":8080"] {
			fastest = p
		}
	}
	return fastest
}

// accrualEndpoint returns the state and estimate of replica p in the
// client's proxy's endpoints of Service accrual ("unknown" when it cannot
// be read or is not there).
func (b *breakerTest) accrualEndpoint(t *testing.T, p corev1.Pod) (string, float64) {
	t.Helper()
	sets, err := proxyEndpointSets(clustertest.Context(t, 10*time.Second), b.c, b.ns, b.client)
	if err != nil {
		t.Logf("reading the client's proxy endpoints: %v", err)
		return "unknown", 0
	}
	for _, set := range sets {
		for _, ep := range set.Endpoints {
			if set.Labels["service"] == "accrual" && ep.Addr == p.Status.PodIP+":8080" {
				return ep.State, ep.EWMAms
			}
		}
	}
	return "unknown", 0
}

// selectorless creates Service name, port 80 named http, without a
// selector: its endpoints are the EndpointSlices the test writes.
func (b *breakerTest) selectorless(t *testing.T, name string) {
	t.Helper()
	_, err := b.c.Client.CoreV1().Services(b.ns).Create(clustertest.Context(t, time.Minute), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

func (b *breakerTest) circuitBreaking(t *testing.T) {
	// The replica the balancer favours fails: without failure accrual it
	// would take a third of the requests or more (the control below); on
	// three nodes one the balancer avoids anyway took 11 % (a CI run).
	bad := b.favoured
	b.setFailing(t, bad, 500)
	t.Cleanup(func() { b.setFailing(t, bad, 0) })
	began := time.Now()
	run := b.start(t, "-rate", "100", "-duration", "21s", "-c", "8", "-timeline", b.url("accrual", "/accrual"))
	// The control, meanwhile: the same replicas without failure accrual.
	plain := b.load(t, "-rate", "100", "-duration", "5s", "-c", "4", b.url("plain", "/plain"))
	// The fix comes after at least three probes (1s, 2s and 4s, each up
	// to 1.25 times that plus probeSlack: 10.25s) and leaves the load 8s
	// to take the replica back.
	time.Sleep(time.Until(began.Add(12500 * time.Millisecond))) // Sleep: the probes' schedule is what is checked
	fixed := time.Now()
	b.setFailing(t, bad, 0)
	res := timed(t, run)
	got := receivedAt(t, bad, "/accrual")
	if len(res.Timeline) == 0 {
		t.Fatalf("the load sent nothing: %v %v", res.Statuses, res.Errors)
	}
	start := res.Timeline[0].start()

	// The control wants a real share without accrual — 5 % or more, and
	// five times what it gets with accrual after the first second (below)
	// — not a third: on three nodes the replicas answer at different
	// speeds and peak EWMA does not split evenly (8.8 % to 57 % in runs).
	sent, reached := countSent(res.Timeline, start.Add(time.Second), fixed), countReceived(got, start.Add(time.Second), fixed)
	share := float64(plain.Statuses["500"]) / float64(max(plain.Requests, 1))
	if share < 0.05 || share < 5*float64(reached)/float64(max(sent, 1)) || plain.Statuses["200"]+plain.Statuses["500"] != plain.Requests {
		t.Errorf("without failure accrual the failing replica answered %.1f%% of %d requests (%v %v), with it %d of %d; want 5%% or more, and five times that: the test proves nothing",
			100*share, plain.Requests, plain.Statuses, plain.Errors, reached, sent)
	}
	if res.Statuses["200"]+res.Statuses["500"] != res.Requests || len(res.Errors) != 0 {
		t.Errorf("statuses %v %v; want only the servers' 200s and 500s", res.Statuses, res.Errors)
	}
	failed := 0
	for _, a := range got {
		if a.Status == http.StatusInternalServerError {
			failed++
		}
	}
	if failed != res.Statuses["500"] {
		t.Errorf("the client got %d answers 500, the failing replica recorded %d: the record is not the traffic", res.Statuses["500"], failed)
	}
	// Under 2 % after the first second.
	if sent < 500 {
		t.Fatalf("only %d requests were sent between the first second and the fix %v after the start", sent, fixed.Sub(start).Round(time.Millisecond))
	}
	if reached*50 >= sent {
		t.Errorf("%d of %d requests (%.1f%%) reached the failing replica after the first second, want under 2%%", reached, sent, 100*float64(reached)/float64(sent))
	}

	// One probe a penalty.
	var ejected []time.Time
	for _, a := range got {
		if a.At.Before(fixed) {
			ejected = append(ejected, a.At)
		}
	}
	// The first max-failures requests eject the replica however spread
	// they are (gaps of over 250 ms among the first five were seen on a
	// loaded machine, twice), with those that reach it right after them
	// (placed before the ejection); the rest are split into runs at gaps
	// of half the shortest penalty: no probe comes sooner after the one
	// before.
	apart := scaled(accrualMinPenalty, 1-accrualJitter/2) / 2
	if len(ejected) < accrualMaxFailures {
		t.Fatalf("the failing replica received %d requests before the fix; want at least %d (max-failures) before it is ejected; the client's balancer now: %s",
			len(ejected), accrualMaxFailures, b.clientEndpoints())
	}
	first, rest := ejected[:accrualMaxFailures], ejected[accrualMaxFailures:]
	for len(rest) > 0 && rest[0].Sub(first[len(first)-1]) < apart {
		first, rest = append(first, rest[0]), rest[1:]
	}
	runs := append([][]time.Time{first}, bursts(rest, apart)...)
	gaps := checkProbes(t, runs)
	if len(gaps) < 3 {
		t.Errorf("%d probes in the %v before the fix (runs of requests %v), want at least 3 (penalties 1s, 2s, 4s)", len(gaps), fixed.Sub(runs[0][0]).Round(time.Millisecond), runLengths(runs))
	}

	// Back within one max penalty once fixed, then a real share.
	var rejoined time.Time
	for _, a := range got {
		if !a.At.Before(fixed) && a.Status == http.StatusOK {
			rejoined = a.At
			break
		}
	}
	if rejoined.IsZero() {
		t.Fatalf("the fixed replica answered none of the requests of the %v after the fix", time.Unix(0, res.Timeline[len(res.Timeline)-1].StartUnixNano).Sub(fixed).Round(time.Millisecond))
	}
	if d, limit := rejoined.Sub(fixed), scaled(accrualMaxPenalty, 1+accrualJitter/2)+probeSlack; d > limit {
		t.Errorf("the fixed replica answered its first request %v after the fix, want within %v", d.Round(time.Millisecond), limit)
	}
	// Back in means in the client's proxy's pairs again, not probed: its
	// state there is ready, and it takes more than probes would (one a
	// penalty, at most 2 in the ~5 s left). Not a third: the replicas
	// answer at different speeds on three nodes and peak EWMA favours
	// the fastest (runs measured 3.4 %, 14 %, 23 %, 54 % and 67 %); the
	// slowest still takes a request every 2 s (balance.Remeasure), and
	// the probe's own answer is no peak that keeps it out (a restored
	// endpoint rejoins as a newcomer; a three-node CI run saw 0 of 650
	// before that).
	after := rejoined.Add(time.Second)
	sentAfter, servedAfter := countSent(res.Timeline, after, time.Now()), countReceived(got, after, time.Now())
	state, ewma := b.accrualEndpoint(t, bad)
	if sentAfter < 100 || servedAfter < 3 || state != "ready" {
		t.Errorf("from 1s after it rejoined the fixed replica served %d of %d requests and the client's proxy holds it %q (estimate %.1f ms); want 3 or more of at least 100, and ready",
			servedAfter, sentAfter, state, ewma)
	}
	t.Logf("without failure accrual the failing replica answered %d of %d; with it: %d of %d after the first second (%d at first), probes after %v; fixed, it answered %v later and then served %d of %d",
		plain.Statuses["500"], plain.Requests, reached, sent, len(runs[0]), gaps, rejoined.Sub(fixed).Round(time.Millisecond), servedAfter, sentAfter)
}

// checkProbes checks the runs of requests a failing replica received
// (bursts): after the first (the failures that eject it), each run must be
// one request, a probe, that came a jittered penalty after the request
// before it: min-penalty·2^(k−1) capped at max-penalty for the k-th. It
// returns the gaps before the probes.
func checkProbes(t *testing.T, runs [][]time.Time) []time.Duration {
	t.Helper()
	var gaps []time.Duration
	prev := runs[0][len(runs[0])-1]
	for k, run := range runs[1:] {
		base := min(accrualMinPenalty<<k, accrualMaxPenalty)
		lo, hi := scaled(base, 1-accrualJitter/2)-50*time.Millisecond, scaled(base, 1+accrualJitter/2)+probeSlack
		gap := run[0].Sub(prev)
		gaps = append(gaps, gap.Round(time.Millisecond))
		if gap < lo || gap > hi {
			t.Errorf("probe %d came %v after the request before it, want %v to %v (penalty %v)", k+1, gap.Round(time.Millisecond), lo, hi, base)
		}
		if len(run) != 1 {
			t.Errorf("probe %d: %d requests within %v of each other reached the ejected replica, want one", k+1, len(run), run[len(run)-1].Sub(run[0]).Round(time.Millisecond))
		}
		prev = run[len(run)-1]
	}
	return gaps
}

// bursts splits times (in order) into runs whose members are under apart
// from the one before.
func bursts(times []time.Time, apart time.Duration) [][]time.Time {
	var runs [][]time.Time
	for i, at := range times {
		if i == 0 || at.Sub(times[i-1]) >= apart {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], at)
	}
	return runs
}

func runLengths(runs [][]time.Time) []int {
	out := make([]int, len(runs))
	for i, r := range runs {
		out[i] = len(r)
	}
	return out
}

func scaled(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

func (b *breakerTest) floor(t *testing.T) {
	for _, p := range b.backends {
		b.setFailing(t, p, 500)
		t.Cleanup(func() { b.setFailing(t, p, 0) })
	}
	res := timed(t, b.start(t, "-rate", "100", "-duration", "6s", "-c", "4", "-timeline", b.url("accrual", "/floor")))
	if res.Statuses["500"] != res.Requests || len(res.Errors) != 0 {
		t.Errorf("statuses %v, proxy and other errors %v; want all %d requests answered the servers' 500", res.Statuses, res.Errors, res.Requests)
	}
	// Every request reached a server, and at least two of the three kept
	// taking requests after the first two seconds (at most one of three is
	// out at once).
	late := res.Timeline[0].start().Add(2 * time.Second)
	total, serving := 0, 0
	var counts []string
	for _, p := range b.backends {
		got := receivedAt(t, p, "/floor")
		n := countReceived(got, late, time.Now())
		total += len(got)
		if n > 0 {
			serving++
		}
		counts = append(counts, fmt.Sprintf("%s %d (%d late)", p.Name, len(got), n))
	}
	if total != res.Requests {
		t.Errorf("the servers received %d requests of the %d sent", total, res.Requests)
	}
	if serving < 2 {
		t.Errorf("%d replicas received requests after the first 2s, want at least 2: %v", serving, counts)
	}
	t.Logf("statuses %v; received %v", res.Statuses, counts)
}

func (b *breakerTest) failFast(t *testing.T) {
	res := timed(t, b.start(t, "-n", "2", "-timeline", b.url("gap", "/gap")))
	first, second := res.Timeline[0], res.Timeline[1]
	if first.Status != "503" || first.ProxyError != "no-endpoints" || first.MS < 2500 || first.MS > 6000 {
		t.Errorf("the first request was answered %s (plexus-proxy-error %q) in %.0f ms, want 503 no-endpoints after 2500-6000 ms", first.Status, first.ProxyError, first.MS)
	}
	if second.Status != "503" || second.ProxyError != "no-endpoints" || second.MS > 1000 {
		t.Errorf("the next request was answered %s (plexus-proxy-error %q) in %.0f ms, want 503 no-endpoints at once (under 1000 ms)", second.Status, second.ProxyError, second.MS)
	}
	appeared := time.Now()
	b.setGapEndpoint(t)
	b.waitGapAnswers(t)
	t.Logf("503 no-endpoints after %.0f ms, then after %.0f ms; gap answered 200 %v after its endpoint appeared",
		first.MS, second.MS, time.Since(appeared).Round(time.Millisecond))
}

func (b *breakerTest) gap(t *testing.T) {
	b.setGapEndpoint(t) // there already, unless fail-fast did not run
	b.waitGapAnswers(t)
	// 20 req/s with room for every request sent during the gap to wait.
	run := b.start(t, "-rate", "20", "-duration", "60s", "-c", "50", "-timeline", b.url("gap", "/gap"))
	time.Sleep(2 * time.Second) // Sleep: 2s of load before the gap, part of what is measured
	removed := time.Now()
	ctx := clustertest.Context(t, time.Minute)
	if err := b.c.Client.DiscoveryV1().EndpointSlices(b.ns).Delete(ctx, gapSlice, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the EndpointSlice of gap: %v", err)
	}
	time.Sleep(time.Second) // Sleep: the gap's length is the scenario
	restored := time.Now()
	b.setGapEndpoint(t)
	time.Sleep(2 * time.Second) // Sleep: 2s of load after the gap, part of what is measured
	run.stop(t)
	res := timed(t, run)

	var during []timedSample
	var failed []string
	for _, s := range res.Timeline {
		at := s.start()
		if !at.Before(removed) && at.Before(restored) {
			during = append(during, s)
		}
		if s.Status != "200" {
			failed = append(failed, fmt.Sprintf("%s %q at %v", s.Status, s.ProxyError, at.Sub(removed).Round(time.Millisecond)))
		}
	}
	if len(during) < 10 {
		t.Fatalf("%d requests were sent during the gap: the load (%d requests, %.1fs) did not span it", len(during), res.Requests, res.Seconds)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d requests were not answered 200 (status, plexus-proxy-error, sent after the endpoint was removed): %v",
			len(failed), res.Requests, failed[:min(len(failed), 10)])
	}
	// The gap as the client's proxy saw it: a request sent in it waited.
	longest := slices.MaxFunc(during, func(x, y timedSample) int { return cmp.Compare(x.MS, y.MS) }).MS
	if longest < 300 {
		t.Errorf("no request sent during the gap waited (the longest took %.0f ms): the client's proxy never saw it, so this proves nothing", longest)
	}
	if len(res.Servers) != 1 || res.Servers[b.backends[1].Name] != res.Statuses["200"] {
		t.Errorf("answered by %v, want only %s (gap's endpoint)", res.Servers, b.backends[1].Name)
	}
	t.Logf("%d requests sent during the 1s gap (the longest took %.0f ms); %d in all, statuses %v", len(during), longest, res.Requests, res.Statuses)
}

func (b *breakerTest) queueFull(t *testing.T) {
	res := timed(t, b.start(t, "-n", "150", "-c", "150", "-timeline", b.url("full", "/full")))
	var waited, full int
	var wrong []string
	for i, s := range res.Timeline {
		switch {
		case s.Status == "503" && s.ProxyError == "queue-full" && s.MS < 1000:
			full++
		case s.Status == "503" && s.ProxyError == "no-endpoints" && s.MS >= 2000 && s.MS <= 6000:
			waited++
		default:
			wrong = append(wrong, fmt.Sprintf("#%d %s %q after %.0f ms", i, s.Status, s.ProxyError, s.MS))
		}
	}
	if waited != 100 || full != 50 || len(wrong) > 0 {
		t.Errorf("%d answered no-endpoints after 2-6s, %d queue-full in under 1s, want 100 and 50; %d others: %v",
			waited, full, len(wrong), wrong[:min(len(wrong), 10)])
	}
	t.Logf("%d no-endpoints, %d queue-full; latency %+v ms", waited, full, res.Latency)
}

// gapSlice is the EndpointSlice of Service gap the test writes.
const gapSlice = "gap-by-test"

// setGapEndpoint creates gapSlice, backend's second replica as Service
// gap's one endpoint (with its targetRef, which gives destination the
// pod's identity), unless it exists.
func (b *breakerTest) setGapEndpoint(t *testing.T) {
	t.Helper()
	p := b.backends[1]
	_, err := b.c.Client.DiscoveryV1().EndpointSlices(b.ns).Create(clustertest.Context(t, time.Minute), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: gapSlice, Labels: map[string]string{
			discoveryv1.LabelServiceName: "gap",
			discoveryv1.LabelManagedBy:   "plexus-tests",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: b.ns, Name: p.Name, UID: p.UID},
		}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the EndpointSlice of gap: %v", err)
	}
}

// waitGapAnswers waits until the client reaches gap's endpoint.
func (b *breakerTest) waitGapAnswers(t *testing.T) {
	t.Helper()
	clustertest.WaitFor(t, 10*time.Second, "gap to answer 200", func(ctx context.Context) (bool, error) {
		res, err := b.tryLoad(ctx, b.url("gap", "/gap"))
		if err != nil || res.Statuses["200"] == 1 {
			return err == nil, err
		}
		return false, fmt.Errorf("statuses %v %v", res.Statuses, res.Errors)
	})
}

// clientEndpoints is the client proxy's /endpoints document (each
// endpoint's state, pending requests and estimate), for a failure's
// message.
func (b *breakerTest) clientEndpoints() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := kubectlOutput(ctx, b.c, "", "-n", b.ns, "exec", b.client, "-c", "app", "--", "/testapp", "get", "http://127.0.0.1:4191/endpoints")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return out
}

// start starts testapp load in the client pod (loadClient.start).
func (b *breakerTest) start(t *testing.T, args ...string) *runningLoad {
	t.Helper()
	return loadClient{b.routesTest, meshedClient}.start(t, args...)
}

// timedLoad is testapp load's summary with each request's proxy error in
// the timeline.
type timedLoad struct {
	loadResult
	Timeline []timedSample
}

type timedSample struct {
	StartUnixNano int64 `json:"start_unix_nano"`
	MS            float64
	Status        string
	ProxyError    string `json:"proxy_error"`
}

func (s timedSample) start() time.Time { return time.Unix(0, s.StartUnixNano) }

// timed waits for a load started with -timeline and returns its summary.
func timed(t *testing.T, r *runningLoad) timedLoad {
	t.Helper()
	var res timedLoad
	if err := json.Unmarshal(r.summary(t), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Timeline) != res.Requests || res.Requests == 0 {
		t.Fatalf("a timeline of %d requests for %d sent (no -timeline?)", len(res.Timeline), res.Requests)
	}
	return res
}

// countSent counts the requests started in [from, to).
func countSent(timeline []timedSample, from, to time.Time) int {
	n := 0
	for _, s := range timeline {
		if at := s.start(); !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// arrival is a request a replica received: when, and its answer's status.
type arrival struct {
	At     time.Time
	Status int
}

// countReceived counts the arrivals in [from, to).
func countReceived(got []arrival, from, to time.Time) int {
	n := 0
	for _, a := range got {
		if !a.At.Before(from) && a.At.Before(to) {
			n++
		}
	}
	return n
}

// receivedAt returns the requests for path that a backend replica
// received, in order (testapp's /testapp/received).
func receivedAt(t *testing.T, p corev1.Pod, path string) []arrival {
	t.Helper()
	var out struct {
		Dropped  int64
		Received []struct {
			UnixNano int64 `json:"unix_nano"`
			Path     string
			Status   int
		}
	}
	if err := json.Unmarshal(podGet(t, p, "/testapp/received"), &out); err != nil {
		t.Fatalf("/testapp/received of %s: %v", p.Name, err)
	}
	if out.Dropped > 0 {
		t.Fatalf("%s forgot %d of the requests it received", p.Name, out.Dropped)
	}
	var got []arrival
	for _, r := range out.Received {
		if r.Path == path {
			got = append(got, arrival{time.Unix(0, r.UnixNano), r.Status})
		}
	}
	return got
}

// setFailing makes a backend replica answer every request with status, or
// normally with 0.
func (b *breakerTest) setFailing(t *testing.T, p corev1.Pod, status int) {
	t.Helper()
	podGet(t, p, "/testapp/fail?status="+strconv.Itoa(status))
}

// podGet GETs path from port 8080 of a pod, from the test process at the
// pod's IP (not through the client's proxy), and returns the body of the
// 200 answer.
func podGet(t *testing.T, p corev1.Pod, path string) []byte {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + net.JoinHostPort(p.Status.PodIP, "8080") + path
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s (%s): %v", url, p.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (%s): %s %v: %.500s", url, p.Name, resp.Status, err, body)
	}
	return body
}
