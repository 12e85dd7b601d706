package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// policyController is the controller name of the route status Plexus writes.
const policyController = "plexus.dev/policy-controller"

// TestRoutes proves traffic management (issue 13) on the real cluster,
// from a meshed client in a Pod Security "restricted" namespace whose
// requests (testapp load, run in the client pod) go through its proxy:
// retries and their budget, gRPC retries, request and per-attempt
// timeouts, HTTPRoute and ServiceProfile traffic splits and how fast a
// weight change lands, matching, every filter, ServiceProfile precedence,
// route status, and exact per-route metrics.
//
// One namespace holds it all: the client, the backends echo (every
// HTTP-side behaviour, asked per request: see testapp's documentation),
// v1 and v2 (splits and matching) and grpc; the Services flaky, slow,
// budget, ... select echo and carry each subtest's annotations, so the
// per-route metrics of one subtest are its own.
func TestRoutes(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Install(t)
	installRouteCRDs(t, c)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	gw, err := gateway.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t, "routes", map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "plexus.dev/inject": "enabled"})
	r := &routesTest{c: c, gw: gw, ns: ns}
	r.deployAll(t)

	t.Run("retries: 50% 503 with 5xx and limit 3 gives at least 99% success", func(t *testing.T) {
		before := r.stats(t, "echo")
		res := r.load(t, "-n", "1000", "-c", "16", "-H", "x-fail-key: {run}-{worker}", r.url("flaky", "/?fail=0.5&status=503"))
		failed := r.stats(t, "echo").Failed - before.Failed
		if ok := res.Statuses["200"]; ok < 990 {
			t.Errorf("%d of 1000 requests succeeded, want at least 990: %v %v", ok, res.Statuses, res.Errors)
		}
		if failed < 400 {
			t.Errorf("the backend failed only %d attempts: it did not fail half of them, so this proves nothing", failed)
		}
		t.Logf("statuses %v; the backend failed %d attempts; %.1fs", res.Statuses, failed, res.Seconds)
	})

	t.Run("retries: the budget holds the retry ratio at 100% failure", func(t *testing.T) {
		const n, ratio = 1000, 0.2 // the budget route's retry.plexus.dev/budget
		before := r.metrics(t)
		res := r.load(t, "-n", strconv.Itoa(n), "-c", "16", r.url("budget", "/?fail=1&status=503"))
		after := r.metrics(t)
		if res.Statuses["503"] != n {
			t.Errorf("statuses %v %v; want all %d 503", res.Statuses, res.Errors, n)
		}
		p := r.parent("budget")
		retries := grewBy(before, after, "outbound_http_route_retry_requests_total", p...)
		overflow := grewBy(before, after, "outbound_http_route_retry_overflow_total", p...)
		requests := grewBy(before, after, "outbound_http_route_request_statuses_total", p...)
		got := retries / n
		if math.Abs(got-ratio) > 0.02 {
			t.Errorf("retry ratio %.3f (%v retries for %d requests), want %.2f ± 0.02", got, retries, n, ratio)
		}
		if overflow == 0 {
			t.Errorf("no retry overflowed the budget")
		}
		t.Logf("retries %v, overflows %v, route requests %v, ratio %.3f", retries, overflow, requests, got)
	})

	t.Run("retries: gRPC UNAVAILABLE retried on a GRPCRoute", func(t *testing.T) {
		before := r.metrics(t)
		res := r.load(t, "-grpc", "-n", "20", "-H", "x-fail: 0.5", "-H", "x-fail-key: {run}", r.host("grpc")+":80")
		if res.Statuses["OK"] != 20 {
			t.Errorf("statuses %v %v; want 20 OK", res.Statuses, res.Errors)
		}
		// One key, one call at a time: the backend answers ok, then for
		// each later call UNAVAILABLE and ok on the retry.
		p := r.parent("grpc")
		r.wantDeltas(t, before,
			metricDelta{"outbound_grpc_route_retry_requests_total", p, 19},
			metricDelta{"outbound_grpc_route_retry_successes_total", p, 19},
			metricDelta{"outbound_grpc_route_retry_limit_exceeded_total", p, 0},
			metricDelta{"outbound_grpc_route_request_statuses_total", labelsWith(p, `grpc_status="0"`), 20},
			metricDelta{"outbound_grpc_route_backend_requests_total", p, 39},
		)
	})

	t.Run("timeouts: request timeout 300ms answers 504 in 300-400ms and cancels the upstream request", func(t *testing.T) {
		r.load(t, "-n", "2", r.url("slow", "/")) // discovery done before measuring
		before := r.stats(t, "echo")
		res := r.load(t, "-n", "5", "-c", "5", r.url("slow", "/?delay=2s"))
		if res.Statuses["504"] != 5 {
			t.Errorf("statuses %v %v; want 5 × 504", res.Statuses, res.Errors)
		}
		if l := res.Latency; l.Min < 300 || l.Max > 400 {
			t.Errorf("504s took %.0f-%.0f ms in the client, want 300-400", l.Min, l.Max)
		}
		var s backendStats
		clustertest.WaitFor(t, 5*time.Second, "the backend to end the 5 delays", func(context.Context) (bool, error) {
			s = r.stats(t, "echo")
			return s.Cancelled+s.Delayed-before.Cancelled-before.Delayed >= 5, nil
		})
		if cancelled, finished := s.Cancelled-before.Cancelled, s.Delayed-before.Delayed; cancelled != 5 || finished != 0 {
			t.Errorf("the backend saw %d requests cancelled and %d waited to the end; want all 5 cancelled", cancelled, finished)
		}
		t.Logf("latency %+v ms", res.Latency)
	})

	t.Run("timeouts: a per-attempt timeout then a retry succeeds against a slow first attempt", func(t *testing.T) {
		r.load(t, "-n", "2", r.url("attempt", "/"))
		before := r.stats(t, "echo")
		res := r.load(t, "-n", "5", "-c", "5", "-H", "x-attempt-key: {run}-{i}", r.url("attempt", "/?delay=2s"))
		if res.Statuses["200"] != 5 {
			t.Errorf("statuses %v %v; want 5 × 200", res.Statuses, res.Errors)
		}
		// At least the 300ms attempt timeout, and well short of the 2s
		// a first attempt waits.
		if l := res.Latency; l.Min < 300 || l.Max > 1500 {
			t.Errorf("requests took %.0f-%.0f ms, want 300-1500", l.Min, l.Max)
		}
		clustertest.WaitFor(t, 5*time.Second, "the backend to see the 5 first attempts cancelled", func(context.Context) (bool, error) {
			return r.stats(t, "echo").Cancelled-before.Cancelled >= 5, nil
		})
	})

	t.Run("split: HTTPRoute 90/10 over 2000 requests", func(t *testing.T) {
		res := r.load(t, "-n", "2000", "-c", "16", r.url("split", "/"))
		wantSplit(t, res, 2000, 0.10)
	})

	t.Run("split: a weight change takes effect in under 1s", func(t *testing.T) {
		type result struct {
			res loadResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := r.tryLoad(ctx, "-rate", "100", "-duration", "12s", "-c", "8", "-timeline", r.url("split", "/"))
			done <- result{res, err}
		}()
		time.Sleep(3 * time.Second) // Sleep: measuring: the load runs on the old weights first (12s of load leaves room for a slow start or apply)
		applied := time.Now()
		r.apply(t, splitRoute(0, 100))
		changed := time.Now()
		out := <-done
		if out.err != nil {
			t.Fatal(out.err)
		}
		var v1Before, v2After int
		var lastV1 time.Time
		for _, s := range out.res.Timeline {
			at, app := time.Unix(0, s.StartUnixNano), appOf(s.Server)
			if app == "v1" && at.Before(applied) {
				v1Before++
			}
			if app == "v1" && at.After(lastV1) {
				lastV1 = at
			}
			if app == "v2" && at.After(changed.Add(time.Second)) {
				v2After++
			}
		}
		if v1Before == 0 || v2After == 0 {
			t.Fatalf("%d answers from v1 before the change and %d from v2 after it: the load did not span the change (%v)", v1Before, v2After, out.res.Statuses)
		}
		if late := lastV1.Sub(changed); late > time.Second {
			t.Errorf("v1 still answered a request started %v after the weights moved to v2", late.Round(time.Millisecond))
		}
		t.Logf("kubectl apply took %v; the last v1 answer started %v after it returned", changed.Sub(applied).Round(time.Millisecond), lastV1.Sub(changed).Round(time.Millisecond))
	})

	t.Run("split: ServiceProfile dstOverrides 90/10 over 2000 requests", func(t *testing.T) {
		r.applyProfile(t, r.profile("split-sp", `
  dstOverrides:
  - authority: v1.{{ns}}.svc.cluster.local:80
    weight: 90
  - authority: v2.{{ns}}.svc.cluster.local:80
    weight: 10`))
		clustertest.WaitFor(t, 20*time.Second, "the profile's split to reach the client", func(ctx context.Context) (bool, error) {
			res, err := r.tryLoad(ctx, "-n", "100", "-c", "8", r.url("split-sp", "/"))
			return err == nil && res.apps()["v2"] > 0, err
		})
		res := r.load(t, "-n", "2000", "-c", "16", r.url("split-sp", "/"))
		wantSplit(t, res, 2000, 0.10)
	})

	t.Run("matching: path, header and method", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string // app, or "404"
		}{
			{"path prefix /v1", []string{r.url("match", "/v1/a")}, "v1"},
			{"path prefix /v2", []string{r.url("match", "/v2/a")}, "v2"},
			{"exact path", []string{r.url("match", "/exact")}, "v2"},
			{"exact path, longer", []string{r.url("match", "/exact/more")}, "404"},
			{"regular expression", []string{r.url("match", "/re/123")}, "v2"},
			{"regular expression, no match", []string{r.url("match", "/re/abc")}, "404"},
			{"header", []string{"-H", "x-canary: yes", r.url("match", "/other")}, "v2"},
			{"header with another value", []string{"-H", "x-canary: no", r.url("match", "/other")}, "404"},
			{"method POST", []string{"-X", "POST", r.url("match", "/other")}, "v2"},
			{"no rule matches", []string{r.url("match", "/other")}, "404"},
		} {
			res := r.load(t, append([]string{"-n", "3"}, tc.args...)...)
			if tc.want == "404" {
				if res.Statuses["404"] != 3 {
					t.Errorf("%s: statuses %v, want 3 × 404", tc.name, res.Statuses)
				}
				continue
			}
			if apps := res.apps(); apps[tc.want] != 3 || res.Statuses["200"] != 3 {
				t.Errorf("%s: served by %v with statuses %v, want 3 × 200 from %s", tc.name, apps, res.Statuses, tc.want)
			}
		}
	})

	t.Run("filters", func(t *testing.T) {
		t.Run("request and response header modifiers", func(t *testing.T) {
			res := r.load(t, "-H", "x-set: client", "-H", "x-add: client", "-H", "x-remove: client", r.url("filters", "/headers?echo=1"))
			e := res.echo(t)
			if got := e.Headers.Values("X-Set"); len(got) != 1 || got[0] != "by-route" {
				t.Errorf("backend saw x-set %q, want [by-route]", got)
			}
			if got := strings.Join(e.Headers.Values("X-Add"), ","); !strings.Contains(got, "client") || !strings.Contains(got, "by-route") {
				t.Errorf("backend saw x-add %q, want client and by-route", got)
			}
			if got := e.Headers.Values("X-Remove"); len(got) != 0 {
				t.Errorf("backend saw x-remove %q, want it removed", got)
			}
			h := res.First.Header
			if h.Get("X-Resp-Set") != "by-route" || h.Get("X-Resp-Add") != "by-route" || h.Get("X-Echo-Server") != "" {
				t.Errorf("client saw response headers %v; want x-resp-set and x-resp-add by-route, x-echo-server removed", h)
			}
		})
		t.Run("redirect", func(t *testing.T) {
			res := r.load(t, r.url("filters", "/redirect/a"))
			loc := res.First.Header.Get("Location")
			if res.First.Status != "302" || !regexp.MustCompile(`^http://redirected\.example(:80)?/moved$`).MatchString(loc) {
				t.Errorf("answer %s Location %q, want 302 to http://redirected.example/moved", res.First.Status, loc)
			}
		})
		t.Run("URLRewrite full path and hostname", func(t *testing.T) {
			e := r.load(t, r.url("filters", "/full/a?echo=1")).echo(t)
			if e.Path != "/replaced" || e.Host != "rewritten.example" {
				t.Errorf("backend saw path %q host %q, want /replaced and rewritten.example", e.Path, e.Host)
			}
		})
		t.Run("URLRewrite prefix", func(t *testing.T) {
			e := r.load(t, r.url("filters", "/prefix/a/b?echo=1&x=1")).echo(t)
			if e.Path != "/new/a/b" || !strings.Contains(e.RawQuery, "x=1") {
				t.Errorf("backend saw path %q query %q, want /new/a/b with x=1", e.Path, e.RawQuery)
			}
		})
	})

	t.Run("precedence: a ServiceProfile with routes overrides HTTPRoutes until deleted", func(t *testing.T) {
		r.waitServedBy(t, "prec", "v2") // the HTTPRoute's backend
		r.applyProfile(t, r.profile("prec", `
  routes:
  - name: all
    condition:
      pathRegex: /.*`))
		r.waitServedBy(t, "prec", "v1") // the Service's own endpoints
		r.kubectl(t, "-n", ns, "delete", "serviceprofile", "prec."+ns+".svc.cluster.local")
		r.waitServedBy(t, "prec", "v2")
	})

	t.Run("status: a missing backend is ResolvedRefs=False BackendNotFound and answers 500", func(t *testing.T) {
		rc := r.waitCondition(t, "HTTPRoute", "missing", string(gatewayv1.RouteConditionResolvedRefs), metav1.ConditionFalse)
		if rc.Reason != string(gatewayv1.RouteReasonBackendNotFound) {
			t.Errorf("ResolvedRefs reason %q (%s), want BackendNotFound", rc.Reason, rc.Message)
		}
		r.waitCondition(t, "HTTPRoute", "missing", string(gatewayv1.RouteConditionAccepted), metav1.ConditionTrue)
		// The status writer was elected: the Lease names a destination pod.
		lease, err := c.Client.CoordinationV1().Leases(controlNamespace).Get(clustertest.Context(t, time.Minute), "plexus-destination-status", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || !strings.HasPrefix(*lease.Spec.HolderIdentity, "plexus-destination-") {
			t.Errorf("the route status Lease: %v %v; want one held by a plexus-destination pod", lease, err)
		}
		res := r.load(t, "-n", "3", r.url("missing", "/"))
		if res.Statuses["500"] != 3 || res.First.Header.Get("Plexus-Proxy-Error") == "" {
			t.Errorf("statuses %v, plexus-proxy-error %q; want 3 × 500 naming the reason", res.Statuses, res.First.Header.Get("Plexus-Proxy-Error"))
		}
	})

	t.Run("status: a malformed annotation is Accepted=False naming it and its value", func(t *testing.T) {
		ac := r.waitCondition(t, "HTTPRoute", "malformed", string(gatewayv1.RouteConditionAccepted), metav1.ConditionFalse)
		if !strings.Contains(ac.Message, "retry.plexus.dev/limit") || !strings.Contains(ac.Message, "three") {
			t.Errorf("Accepted=False message %q (reason %s) does not name the annotation and its value", ac.Message, ac.Reason)
		}
	})

	t.Run("metrics: exact counts for a scripted sequence", func(t *testing.T) {
		counted, overflowing, slow, slowResponse := r.parent("counted"), r.parent("overflowing"), r.parent("slow"), r.parent("slow-response")
		for _, svc := range []string{"counted", "overflowing", "slow", "slow-response"} {
			r.load(t, r.url(svc, "/"))
		}
		before := r.metrics(t)
		// 10 failures with limit 2: 2 retries each, all failing.
		r.load(t, "-n", "10", r.url("counted", "/?fail=1"))
		// 10 requests on one key of a 50% backend, one at a time: the
		// first succeeds, each other fails once and succeeds on its retry.
		r.load(t, "-n", "10", "-H", "x-fail-key: {run}", r.url("counted", "/?fail=0.5"))
		// A budget of nothing: every retry overflows.
		r.load(t, "-n", "10", r.url("overflowing", "/?fail=1"))
		// Timeouts: whole request and response.
		r.load(t, "-n", "4", "-c", "4", r.url("slow", "/?delay=2s"))
		r.load(t, "-n", "4", "-c", "4", r.url("slow-response", "/?delay=2s"))
		r.wantDeltas(t, before,
			metricDelta{"outbound_http_route_retry_requests_total", counted, 20 + 9},
			metricDelta{"outbound_http_route_retry_successes_total", counted, 9},
			metricDelta{"outbound_http_route_retry_limit_exceeded_total", counted, 10},
			metricDelta{"outbound_http_route_retry_overflow_total", counted, 0},
			metricDelta{"outbound_http_route_request_statuses_total", labelsWith(counted, `http_status="503"`), 10},
			metricDelta{"outbound_http_route_request_statuses_total", labelsWith(counted, `http_status="200"`), 10},
			metricDelta{"outbound_http_route_backend_requests_total", counted, 30 + 19},
			metricDelta{"outbound_http_route_backend_response_statuses_total", labelsWith(counted, `http_status="503"`), 30 + 9},
			metricDelta{"outbound_http_route_retry_overflow_total", overflowing, 10},
			metricDelta{"outbound_http_route_retry_requests_total", overflowing, 0},
			metricDelta{"outbound_http_route_request_statuses_total", labelsWith(overflowing, `http_status="503"`), 10},
			metricDelta{"outbound_http_route_request_statuses_total", labelsWith(slow, `error="REQUEST_TIMEOUT"`), 4},
			metricDelta{"outbound_http_route_request_statuses_total", labelsWith(slowResponse, `error="RESPONSE_TIMEOUT"`), 4},
		)
	})
}

// routesTest is the namespace TestRoutes deployed.
type routesTest struct {
	c      *clustertest.Cluster
	gw     gateway.Interface
	ns     string
	client string // the client pod
}

// routesBudget is a budget the retry subtests never exhaust.
const routesBudget = "1,10,10s"

// routesServices are the Services of TestRoutes: name, the app its
// selector picks, and its annotations.
var routesServices = []struct {
	name, app   string
	annotations map[string]string
}{
	{"echo", "echo", nil},
	{"v1", "v1", nil},
	{"v2", "v2", nil},
	{"flaky", "echo", map[string]string{"retry.plexus.dev/http": "5xx", "retry.plexus.dev/limit": "3", "retry.plexus.dev/budget": routesBudget}},
	{"budget", "echo", nil}, // its HTTPRoute carries the annotations
	{"slow", "echo", map[string]string{"timeout.plexus.dev/request": "300ms"}},
	{"slow-response", "echo", map[string]string{"timeout.plexus.dev/response": "300ms"}},
	{"attempt", "echo", map[string]string{"retry.plexus.dev/http": "5xx", "retry.plexus.dev/limit": "2", "retry.plexus.dev/timeout": "300ms", "retry.plexus.dev/budget": routesBudget}},
	{"counted", "echo", map[string]string{"retry.plexus.dev/http": "5xx", "retry.plexus.dev/limit": "2", "retry.plexus.dev/budget": "1,100,10s"}},
	{"overflowing", "echo", map[string]string{"retry.plexus.dev/http": "5xx", "retry.plexus.dev/limit": "2", "retry.plexus.dev/budget": "0,0,10s"}},
	{"split", "v1", nil},
	{"split-sp", "v1", nil},
	{"match", "v1", nil},
	{"filters", "echo", nil},
	{"prec", "v1", nil},
	{"missing", "echo", nil},
	{"malformed", "echo", nil},
}

// routesManifest is the routes of TestRoutes, the split one apart.
func routesManifest() string {
	retries := map[string]string{"retry.plexus.dev/http": "5xx", "retry.plexus.dev/limit": "3", "retry.plexus.dev/budget": "0.2,0,10s"}
	grpcRetries := map[string]string{"retry.plexus.dev/grpc": "unavailable", "retry.plexus.dev/limit": "3", "retry.plexus.dev/budget": routesBudget}
	return strings.Join([]string{
		routeYAML("HTTPRoute", "budget", retries, `
  - backendRefs: [{name: budget, port: 80}]`),
		routeYAML("GRPCRoute", "grpc", grpcRetries, `
  - matches: [{method: {service: grpc.health.v1.Health}}]
    backendRefs: [{name: grpc, port: 80}]`),
		routeYAML("HTTPRoute", "match", nil, `
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs: [{name: v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v2}}]
    backendRefs: [{name: v2, port: 80}]
  - matches: [{path: {type: Exact, value: /exact}}]
    backendRefs: [{name: v2, port: 80}]
  - matches: [{path: {type: RegularExpression, value: "^/re/[0-9]+$"}}]
    backendRefs: [{name: v2, port: 80}]
  - matches: [{headers: [{name: x-canary, value: "yes"}]}]
    backendRefs: [{name: v2, port: 80}]
  - matches: [{method: POST}]
    backendRefs: [{name: v2, port: 80}]`),
		routeYAML("HTTPRoute", "filters", nil, `
  - matches: [{path: {type: PathPrefix, value: /headers}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: x-set, value: by-route}]
        add: [{name: x-add, value: by-route}]
        remove: [x-remove]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: x-resp-set, value: by-route}]
        add: [{name: x-resp-add, value: by-route}]
        remove: [x-echo-server]
    backendRefs: [{name: echo, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /redirect}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: redirected.example, statusCode: 302, path: {type: ReplaceFullPath, replaceFullPath: /moved}}
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: rewritten.example, path: {type: ReplaceFullPath, replaceFullPath: /replaced}}
    backendRefs: [{name: echo, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /prefix}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}
    backendRefs: [{name: echo, port: 80}]`),
		routeYAML("HTTPRoute", "prec", nil, `
  - backendRefs: [{name: v2, port: 80}]`),
		routeYAML("HTTPRoute", "missing", nil, `
  - backendRefs: [{name: nowhere, port: 80}]`),
		routeYAML("HTTPRoute", "malformed", map[string]string{"retry.plexus.dev/limit": "three"}, `
  - backendRefs: [{name: malformed, port: 80}]`),
	}, "---")
}

// splitRoute is the HTTPRoute of Service split with these weights.
func splitRoute(v1, v2 int) string {
	return routeYAML("HTTPRoute", "split", nil, fmt.Sprintf(`
  - backendRefs: [{name: v1, port: 80, weight: %d}, {name: v2, port: 80, weight: %d}]`, v1, v2))
}

// routeYAML is a route of kind (HTTPRoute, GRPCRoute) named like its
// parent, port 80 of the Service name, with annotations and rules (YAML
// list items indented by two spaces).
func routeYAML(kind, name string, annotations map[string]string, rules string) string {
	a := " {}"
	if len(annotations) > 0 {
		a = ""
		for _, k := range slices.Sorted(maps.Keys(annotations)) {
			a += fmt.Sprintf("\n    %s: %q", k, annotations[k])
		}
	}
	return fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: %s
metadata:
  name: %s
  namespace: {{ns}}
  annotations:%s
spec:
  parentRefs: [{group: "", kind: Service, name: %s, port: 80}]
  rules:%s
`, kind, name, a, name, rules)
}

// deployAll deploys the workloads, Services and routes at once, waits
// for the pods and for the routes to be Accepted, and for the client to
// reach echo through its proxy.
func (r *routesTest) deployAll(t *testing.T) {
	t.Helper()
	for _, d := range []struct {
		name string
		args []string
	}{
		{"client", []string{"serve", ":8080"}}, // idle: the tests exec testapp load in it
		{"echo", []string{"serve", ":8080"}},
		{"v1", []string{"serve", ":8080"}},
		{"v2", []string{"serve", ":8080"}},
		{"grpc", []string{"serve", "-grpc", ":9090", ":8080"}},
	} {
		deploy(t, r.c, r.ns, d.name, 1, meshed, restricted(podSpec(d.name, d.args...)))
	}
	for _, s := range routesServices {
		r.service(t, s.name, s.app, 8080, "", s.annotations)
	}
	r.service(t, "grpc", "grpc", 9090, "grpc", nil)
	r.apply(t, routesManifest()+"---"+splitRoute(90, 10))
	for _, d := range []string{"client", "echo", "v1", "v2", "grpc"} {
		r.c.WaitDeploymentReady(t, r.ns, d, 3*time.Minute)
	}
	r.client = pods(t, r.c, r.ns, "client")[0].Name
	for _, name := range []string{"budget", "match", "filters", "prec", "split"} {
		r.waitCondition(t, "HTTPRoute", name, string(gatewayv1.RouteConditionAccepted), metav1.ConditionTrue)
		r.waitCondition(t, "HTTPRoute", name, string(gatewayv1.RouteConditionResolvedRefs), metav1.ConditionTrue)
	}
	r.waitCondition(t, "GRPCRoute", "grpc", string(gatewayv1.RouteConditionAccepted), metav1.ConditionTrue)
	clustertest.WaitFor(t, time.Minute, "the client to reach echo through its proxy", func(ctx context.Context) (bool, error) {
		res, err := r.tryLoad(ctx, r.url("echo", "/"))
		return err == nil && res.Statuses["200"] == 1, err
	})
}

// service creates Service name: port 80 to targetPort of the pods
// labelled app=app.
func (r *routesTest) service(t *testing.T, name, app string, targetPort int32, appProtocol string, annotations map[string]string) {
	t.Helper()
	port := corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(targetPort)}
	if appProtocol != "" {
		port.Name, port.AppProtocol = appProtocol, &appProtocol
	}
	_, err := r.c.Client.CoreV1().Services(r.ns).Create(clustertest.Context(t, time.Minute), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{port}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

func (r *routesTest) host(svc string) string { return svc + "." + r.ns + ".svc.cluster.local" }

func (r *routesTest) url(svc, pathAndQuery string) string {
	return "http://" + r.host(svc) + pathAndQuery
}

// parent is the labels of the route metrics of Service svc.
func (r *routesTest) parent(svc string) []string {
	return []string{`parent_namespace="` + r.ns + `"`, `parent_name="` + svc + `"`}
}

func labelsWith(labels []string, more ...string) []string {
	return append(append([]string{}, labels...), more...)
}

// kubectl runs kubectl with doc, with {{ns}} replaced, as its input.
func (r *routesTest) kubectlIn(ctx context.Context, doc string, args ...string) (string, error) {
	return kubectlOutput(ctx, r.c, strings.ReplaceAll(doc, "{{ns}}", r.ns), args...)
}

func (r *routesTest) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := r.kubectlIn(clustertest.Context(t, time.Minute), "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply applies YAML documents in which {{ns}} is the namespace.
func (r *routesTest) apply(t *testing.T, doc string) {
	t.Helper()
	if _, err := r.kubectlIn(clustertest.Context(t, time.Minute), doc, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// applyProfile applies a ServiceProfile, retrying while the
// ServiceProfile validator (fail-closed) is not answering yet.
func (r *routesTest) applyProfile(t *testing.T, doc string) {
	t.Helper()
	clustertest.WaitFor(t, time.Minute, "the ServiceProfile to be admitted", func(ctx context.Context) (bool, error) {
		_, err := r.kubectlIn(ctx, doc, "apply", "-f", "-")
		return err == nil, err
	})
}

// profile is the ServiceProfile of Service svc with spec (YAML indented
// by two spaces).
func (r *routesTest) profile(svc, spec string) string {
	return `
apiVersion: plexus.dev/v1alpha1
kind: ServiceProfile
metadata:
  name: ` + svc + `.{{ns}}.svc.cluster.local
  namespace: {{ns}}
spec:` + spec + "\n"
}

// kubectlOutput runs the cluster's kubectl with stdin as its input and
// returns its standard output.
func kubectlOutput(ctx context.Context, c *clustertest.Cluster, stdin string, args ...string) (string, error) {
	bin := os.Getenv(clustertest.EnvKubectl)
	if bin == "" {
		bin = "kubectl"
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// routeCRDs are the CRDs TestRoutes needs, from deploy/crds.
var routeCRDs = []string{"httproutes.gateway.networking.k8s.io", "grpcroutes.gateway.networking.k8s.io", "serviceprofiles.plexus.dev"}

// installRouteCRDs applies the route CRDs (server-side: the HTTPRoute
// CRD is too large for a client-side apply) and, when the test ends,
// deletes those that were not there before.
func installRouteCRDs(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	ctx := clustertest.Context(t, 2*time.Minute)
	var absent []string
	for _, name := range routeCRDs {
		out, err := kubectlOutput(ctx, c, "", "get", "crd", name, "--ignore-not-found", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) == "" {
			absent = append(absent, name)
		}
	}
	t.Cleanup(func() {
		if len(absent) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := kubectlOutput(ctx, c, "", append([]string{"delete", "crd", "--ignore-not-found"}, absent...)...); err != nil {
			t.Errorf("deleting the CRDs the test installed: %v", err)
		}
	})
	for _, dir := range []string{"../../deploy/crds", "../../deploy/crds/gateway-api"} {
		if _, err := kubectlOutput(ctx, c, "", "apply", "--server-side", "--force-conflicts", "-k", dir); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"wait", "--for=condition=Established", "--timeout=60s"}
	for _, name := range routeCRDs {
		args = append(args, "crd/"+name)
	}
	if _, err := kubectlOutput(ctx, c, "", args...); err != nil {
		t.Fatal(err)
	}
}

// waitCondition waits until the policy controller's status of a route
// (kind HTTPRoute or GRPCRoute) has condition typ with status for the
// route's current generation, and returns the condition.
func (r *routesTest) waitCondition(t *testing.T, kind, name, typ string, status metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	var last []gatewayv1.RouteParentStatus
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("%s %s to be %s=%s", kind, name, typ, status), func(ctx context.Context) (bool, error) {
		var generation int64
		switch kind {
		case "HTTPRoute":
			route, err := r.gw.GatewayV1().HTTPRoutes(r.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			generation, last = route.Generation, route.Status.Parents
		case "GRPCRoute":
			route, err := r.gw.GatewayV1().GRPCRoutes(r.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			generation, last = route.Generation, route.Status.Parents
		default:
			return false, fmt.Errorf("unknown route kind %s", kind)
		}
		for _, p := range last {
			if string(p.ControllerName) != policyController {
				continue
			}
			if c := meta.FindStatusCondition(p.Conditions, typ); c != nil && c.Status == status && c.ObservedGeneration >= generation {
				found = *c
				return true, nil
			}
		}
		return false, fmt.Errorf("status parents %+v", last)
	})
	return found
}

// loadResult is the JSON summary `testapp load` prints.
type loadResult struct {
	Requests int
	Seconds  float64
	Statuses map[string]int
	Errors   map[string]int
	Servers  map[string]int
	Latency  struct{ Min, P50, P90, P99, Max float64 } `json:"latency_ms"`
	First    struct {
		Status string
		Header http.Header
		Body   string
	}
	Timeline []struct {
		StartUnixNano int64 `json:"start_unix_nano"`
		MS            float64
		Status        string
		Server        string
	}
}

// load runs `testapp load args...` in the client pod, so that its
// requests go through the client's proxy.
func (r *routesTest) load(t *testing.T, args ...string) loadResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.tryLoad(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (r *routesTest) tryLoad(ctx context.Context, args ...string) (loadResult, error) {
	return execLoad(ctx, r.c, r.ns, r.client, args...)
}

// execLoad runs `testapp load args...` in pod's app container and reads
// its summary.
func execLoad(ctx context.Context, c *clustertest.Cluster, ns, pod string, args ...string) (loadResult, error) {
	out, err := kubectlOutput(ctx, c, "", append([]string{"-n", ns, "exec", pod, "-c", "app", "--", "/testapp", "load"}, args...)...)
	var res loadResult
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return res, fmt.Errorf("testapp load %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return res, nil
}

// apps counts answers per app (v1, v2, echo, ...).
func (l loadResult) apps() map[string]int {
	out := map[string]int{}
	for server, n := range l.Servers {
		out[appOf(server)] += n
	}
	return out
}

// echoed is the body of an echo=1 answer of request 0.
type echoed struct {
	Server, Method, Path, Host string
	RawQuery                   string `json:"raw_query"`
	Headers                    http.Header
}

func (l loadResult) echo(t *testing.T) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(l.First.Body), &e); err != nil || l.First.Status != "200" {
		t.Fatalf("answer %s %q is not an echo: %v", l.First.Status, l.First.Body, err)
	}
	return e
}

// appOf is the Deployment of a pod name: "v1-5d9c7-x2x4z" → "v1".
func appOf(pod string) string {
	parts := strings.Split(pod, "-")
	if len(parts) < 3 {
		return pod
	}
	return strings.Join(parts[:len(parts)-2], "-")
}

// wantSplit fails unless all n requests succeeded and v2 took share ±
// 3 points of them.
func wantSplit(t *testing.T, res loadResult, n int, share float64) {
	t.Helper()
	apps := res.apps()
	if res.Statuses["200"] != n || apps["v1"]+apps["v2"] != n {
		t.Fatalf("statuses %v, served by %v; want %d answers from v1 and v2", res.Statuses, apps, n)
	}
	got := float64(apps["v2"]) / float64(n)
	if math.Abs(got-share) > 0.03 {
		t.Errorf("v2 took %.1f%% (%v), want %.0f%% ± 3", 100*got, apps, 100*share)
	}
	t.Logf("v2 took %.1f%% of %d requests (%v)", 100*got, n, apps)
}

// waitServedBy waits until every request to svc is answered by app.
func (r *routesTest) waitServedBy(t *testing.T, svc, app string) {
	t.Helper()
	clustertest.WaitFor(t, 20*time.Second, svc+" answered by "+app, func(ctx context.Context) (bool, error) {
		res, err := r.tryLoad(ctx, "-n", "10", "-c", "2", r.url(svc, "/"))
		if err != nil || res.apps()[app] == 10 {
			return err == nil, err
		}
		return false, fmt.Errorf("served by %v, statuses %v", res.apps(), res.Statuses)
	})
}

// backendStats is testapp's /stats.
type backendStats struct {
	Requests, Failed, Delayed, Cancelled int64
}

// stats reads /stats of the (one) pod of app, from inside it.
func (r *routesTest) stats(t *testing.T, app string) backendStats {
	t.Helper()
	pod := pods(t, r.c, r.ns, app)[0].Name
	out := r.kubectl(t, "-n", r.ns, "exec", pod, "-c", "app", "--", "/testapp", "get", "http://127.0.0.1:8080/stats")
	var s backendStats
	i := strings.Index(out, "{")
	if i < 0 {
		t.Fatalf("/stats of %s: %q", pod, out)
	}
	if err := json.Unmarshal([]byte(out[i:]), &s); err != nil {
		t.Fatalf("/stats of %s: %v: %q", pod, err, out)
	}
	return s
}

// metrics is the client proxy's metrics page.
func (r *routesTest) metrics(t *testing.T) string {
	t.Helper()
	return proxyMetrics(t, r.c, r.ns, r.client)
}

// metricDelta is how much the samples of a metric with labels should
// grow.
type metricDelta struct {
	name   string
	labels []string
	want   float64
}

// wantDeltas waits up to 5s for the client proxy's metrics to have grown
// from before by exactly each delta, and reports every one that did not.
func (r *routesTest) wantDeltas(t *testing.T, before string, deltas ...metricDelta) {
	t.Helper()
	var wrong []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := clustertest.Poll(ctx, 250*time.Millisecond, func(context.Context) (bool, error) {
		after := r.metrics(t)
		wrong = wrong[:0]
		for _, d := range deltas {
			if got := grewBy(before, after, d.name, d.labels...); got != d.want {
				wrong = append(wrong, fmt.Sprintf("%s{%s} grew by %v, want %v", d.name, strings.Join(d.labels, ","), got, d.want))
			}
		}
		return len(wrong) == 0, nil
	})
	if err != nil {
		t.Errorf("route metrics after the sequence:\n%s", strings.Join(wrong, "\n"))
	}
}

// grewBy is how much the sum of a metric's samples with labels grew.
func grewBy(before, after, name string, labels ...string) float64 {
	return sumSamples(after, name, labels...) - sumSamples(before, name, labels...)
}

// sumSamples sums the samples of metric name whose labels include every
// one of labels (each `key="value"`).
func sumSamples(page, name string, labels ...string) float64 {
	var sum float64
	for _, l := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(l, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		all := true
		for _, want := range labels {
			all = all && (strings.HasPrefix(set, want) || strings.Contains(set, ","+want))
		}
		fields := strings.Fields(value)
		if len(fields) == 0 || !all {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}
