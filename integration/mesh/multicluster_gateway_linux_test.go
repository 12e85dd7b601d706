package mesh

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
	"github.com/plexus-mesh/plexus/viz/cli/tapview"
)

// gatewayCase is what TestMulticluster's gateway phase needs of the
// flat phase: the clusters, the namespace, a's client and other pods, b's
// hello pods (name → IP) and the policy in b that admits a's client only.
type gatewayCase struct {
	a, b          *clustertest.Cluster
	ns            string
	client, other string
	hello         map[string]string
	id            func(sa string) string // a's identities
	ctlA          plexusctl
}

// testGatewayMode (issue 27's T3): with the clusters' networks
// hierarchical (a's pods reach b's nodes only, so not b's pods), hello is
// exported in gateway mode; a's client reaches b's hello pods through b's
// gateway, which passes its mTLS through: b's proxies name a's client,
// and b's policy admits it and refuses a's other account. From outside
// the mesh, the gateway refuses a pod of b that is not exported, and an
// exported pod reached without mTLS refuses the request itself.
func testGatewayMode(t *testing.T, g gatewayCase) {
	ctx := clustertest.Context(t, 5*time.Minute)
	url := "http://hello-b." + g.ns + ".svc.cluster.local/"
	clustertest.PairMode(t, "hierarchical")
	defer clustertest.PairMode(t, "flat")

	// Pod to pod is refused now: the flat mirror answers nothing.
	res, err := execLoad(ctx, g.a, g.ns, g.client, "-n", "3", "-timeout", "3s", url)
	if err == nil && res.Statuses["200"] > 0 {
		t.Fatalf("hierarchical: a's client still reached b's pods directly: %s", briefResult(res))
	}

	creds, err := g.a.Client.CoreV1().Secrets(mc.Namespace).Get(ctx, "cluster-credentials-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := netip.ParseAddrPort(creds.Annotations[mc.GatewayAddressAnnotation])
	if err != nil {
		t.Fatalf("link wrote no usable gateway address (%s): %v", mc.GatewayAddressAnnotation, err)
	}
	gwPods, err := g.b.Client.CoreV1().Pods(mc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-gateway"})
	if err != nil || len(gwPods.Items) != 1 {
		t.Fatalf("b's gateway pod: %v (%d found)", err, len(gwPods.Items))
	}
	gwPod := gwPods.Items[0].Name
	forwarded := func() int { return gatewayCount(t, g.b, gwPod, "forwarded") }
	before := forwarded()

	setExport(t, g.b, g.ns, "hello", mc.ExportedGateway)
	within(t, "gateway export: hello-b marked gateway", 5*time.Second, func() bool {
		svc, err := g.a.Client.CoreV1().Services(g.ns).Get(ctx, "hello-b", metav1.GetOptions{})
		return err == nil && svc.Labels[mc.GatewayLabel] == "b"
	}, nil)
	start := time.Now()
	within(t, "a's client reaches b's hello through the gateway", 30*time.Second, func() bool {
		res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "20", "-timeout", "5s", url)
		return err == nil && res.Statuses["200"] == 20
	}, func() string { return briefResult(res) + " " + errString(err) })
	t.Logf("gateway mode: first 20×200 %v after the export", time.Since(start).Round(time.Millisecond))
	for server := range res.Servers {
		if _, ok := g.hello[server]; !ok {
			t.Errorf("answered by %s, not one of b's hello pods %v", server, g.hello)
		}
	}
	within(t, "plexusctl multicluster gateways: b's gateway alive, one service", 5*time.Second, gatewaysSay(g, gw, "yes", "1"), nil)
	if n := forwarded(); n <= before {
		t.Errorf("gateway forwarded %d connections, %d before: the requests did not go through it", n, before)
	}
	// The identity passed through: b's proxies name a's client, and so
	// does b's tap (not as b's gateway, whose address the calls come from).
	for name := range res.Servers {
		wantSeries(t, proxyMetrics(t, g.b, g.ns, name), "request_total", `direction="inbound"`, `tls="true"`, `client_id="`+g.id("client")+`"`)
	}
	tapRemoteCaller(t, g, url, "through the gateway")
	within(t, "through the gateway, b's policy refuses a's other account", 30*time.Second, func() bool {
		res, err = execLoad(ctx, g.a, g.ns, g.other, "-n", "5", "-timeout", "5s", url)
		return err == nil && res.Statuses["403"] == 5 && res.Errors["plexus-proxy-error: unauthorized"] == 5
	}, func() string { return briefResult(res) + " " + errString(err) })

	// T6: the gateway refused, then blackholed, on the way from a to b.
	testGatewayDown(t, g, gw, url)

	// An attacker at the gateway's port, outside any mesh.
	refused := gatewayCount(t, g.b, gwPod, "refused")
	clientInB := pods(t, g.b, g.ns, "client")[0]
	if status, err := throughGateway(gw, netip.MustParseAddrPort(clientInB.Status.PodIP+":8080")); err == nil {
		t.Errorf("the gateway forwarded to b's client, not exported: %s", status)
	}
	if n := gatewayCount(t, g.b, gwPod, "refused"); n != refused+1 {
		t.Errorf("gateway refused %d, want %d", n, refused+1)
	}
	for _, ip := range g.hello {
		status, err := throughGateway(gw, netip.MustParseAddrPort(ip+":8080"))
		if err != nil || !strings.HasPrefix(status, "403") {
			t.Errorf("plaintext to exported hello %s through the gateway: %q %v, want its proxy's 403", ip, status, err)
		}
		break
	}

	// Back to flat mode for what follows.
	setExport(t, g.b, g.ns, "hello", mc.ExportedRemoteDiscovery)
	within(t, "flat export again: hello-b no longer marked gateway", 5*time.Second, func() bool {
		svc, err := g.a.Client.CoreV1().Services(g.ns).Get(ctx, "hello-b", metav1.GetOptions{})
		return err == nil && svc.Labels[mc.GatewayLabel] == "" && svc.Labels[mc.RemoteDiscoveryLabel] == "b"
	}, nil)
}

// throughGateway sends a plaintext HTTP request to dst through the
// gateway at gw, from the host (outside any mesh), and returns the
// response's status line.
func throughGateway(gw, dst netip.AddrPort) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := passthrough.Dial(ctx, func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a.String())
	}, gw, dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+dst.String()+"/", nil)
	if err := req.Write(c); err != nil {
		return "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return "", err
	}
	res.Body.Close()
	return res.Status, nil
}

var gatewayCountRE = regexp.MustCompile(`(?m)^plexus_gateway_connections_total\{result="([a-z_]+)"\} (\d+)`)

// gatewayCount is the gateway's connection count of result.
func gatewayCount(t *testing.T, c *clustertest.Cluster, pod, result string) int {
	t.Helper()
	raw, err := c.Client.CoreV1().Pods(mc.Namespace).ProxyGet("http", pod, "9993", "/metrics", nil).DoRaw(clustertest.Context(t, 20*time.Second))
	if err != nil {
		t.Fatalf("gateway metrics: %v", err)
	}
	for _, m := range gatewayCountRE.FindAllStringSubmatch(string(raw), -1) {
		if m[1] == result {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	t.Fatalf("gateway metrics have no plexus_gateway_connections_total{result=%q}", result)
	return 0
}

// testGatewayDown (issue 27's T6): the host, the router between the two
// clusters, refuses (TCP reset) and then drops what a sends to b's
// gateway. Each time a's destination finds it within 3 s (its
// plexus_destination_gateway_healthy{cluster="b"} 0), a's client's proxy
// no longer holds hello-b's endpoints and its requests fail at once
// rather than wait, and a route splitting a's hello between a's pods and
// hello-b sends everything to a's; with the rule gone both come back.
func testGatewayDown(t *testing.T, g gatewayCase, gw netip.AddrPort, url string) {
	ctx := clustertest.Context(t, 3*time.Minute)
	gaugeIs := destinationGauge(t, g.a, `plexus_destination_gateway_healthy{cluster="b"}`)
	// A route splitting a's hello between a's own pods and b's (hello-b,
	// through the gateway): with the gateway down it fails over to a's.
	split := strings.NewReplacer("{{ns}}", g.ns).Replace(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hello-split, namespace: {{ns}}}
spec:
  parentRefs: [{group: "", kind: Service, name: hello, port: 80}]
  rules: [{backendRefs: [{name: hello, port: 80, weight: 50}, {name: hello-b, port: 80, weight: 50}]}]
`)
	if out, err := kubectlOutput(ctx, g.a, split, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the split: %v\n%s", err, out)
	}
	splitURL := "http://hello." + g.ns + ".svc.cluster.local/"
	fromB := func(res loadResult) int {
		n := 0
		for server, k := range res.Servers {
			if _, ok := g.hello[server]; ok {
				n += k
			}
		}
		return n
	}
	var res loadResult
	var err error
	within(t, "the split reaches b's hello through the gateway, and a's", 30*time.Second, func() bool {
		res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "40", "-c", "4", "-timeout", "5s", splitURL)
		return err == nil && res.Statuses["200"] == 40 && fromB(res) > 0 && fromB(res) < 40
	}, func() string { return briefResult(res) + " " + errString(err) })
	healthy, down := gaugeIs("1"), gaugeIs("0")
	within(t, "a's destination finds b's gateway healthy", 10*time.Second, healthy, nil)
	for _, c := range []struct{ name, target string }{
		{"refused", "REJECT --reject-with tcp-reset"},
		{"blackholed", "DROP"},
	} {
		rule := append([]string{"FORWARD", "-d", gw.Addr().String(), "-p", "tcp", "--dport", strconv.Itoa(int(gw.Port())), "-j"}, strings.Fields(c.target)...)
		iptables(t, append([]string{"-I"}, rule...)...)
		removed := false
		remove := func() {
			if !removed {
				removed = true
				iptables(t, append([]string{"-D"}, rule...)...)
			}
		}
		t.Cleanup(remove)
		start := time.Now()
		within(t, "gateway "+c.name+": a's destination finds it down", 3*time.Second, down, nil)
		t.Logf("gateway %s: detected in %v (destination's health checks)", c.name, time.Since(start).Round(time.Millisecond))
		within(t, "gateway "+c.name+": plexusctl multicluster gateways says so", 5*time.Second, gatewaysSay(g, gw, "no", "1"), nil)
		within(t, "gateway "+c.name+": a's client's proxy holds no endpoint of hello-b", 5*time.Second, func() bool {
			sets, err := proxyEndpointSets(ctx, g.a, g.ns, g.client)
			if err != nil {
				return false
			}
			for _, set := range sets {
				if set.Labels["service"] == "hello-b" && len(set.Endpoints) > 0 {
					return false
				}
			}
			return true
		}, nil)
		res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "40", "-c", "4", "-timeout", "5s", splitURL)
		t.Logf("gateway %s: the split: %s, %d from b", c.name, briefResult(res), fromB(res))
		if err != nil || res.Statuses["200"] != 40 || fromB(res) != 0 {
			t.Errorf("gateway %s: the split did not fail over to a's hello: %s %s, %d from b", c.name, briefResult(res), errString(err), fromB(res))
		}
		reqStart := time.Now()
		res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "1", "-timeout", "10s", url)
		if err == nil && res.Statuses["200"] > 0 {
			t.Errorf("gateway %s: a request still got 200: %s", c.name, briefResult(res))
		}
		t.Logf("gateway %s: a request fails in %v: %s %s", c.name, time.Since(reqStart).Round(time.Millisecond), briefResult(res), errString(err))
		remove()
		start = time.Now()
		within(t, "gateway "+c.name+" back: healthy again", 5*time.Second, healthy, nil)
		t.Logf("gateway %s back: healthy in %v", c.name, time.Since(start).Round(time.Millisecond))
		within(t, "gateway "+c.name+" back: a's client reaches b's hello", 15*time.Second, func() bool {
			res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "20", "-timeout", "5s", url)
			return err == nil && res.Statuses["200"] == 20
		}, func() string { return briefResult(res) + " " + errString(err) })
	}
}

// iptables runs iptables on the host (the router between the clusters).
func iptables(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// gatewaysSay reports whether plexusctl multicluster gateways in a shows
// b's gateway at gw, alive as said, with services gateway-mode mirrors.
func gatewaysSay(g gatewayCase, gw netip.AddrPort, alive, services string) func() bool {
	return func() bool {
		out, err := g.ctlA("multicluster", "gateways")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 4 && f[0] == "b" {
				return f[1] == gw.String() && f[2] == alive && f[3] == services
			}
		}
		return false
	}
}

// tapRemoteCaller: b's tap of its hello pods, while a's client calls url,
// names the caller by its identity, a's trust domain as its cluster
// (b's viz is installed with b's trust domain): never as a pod of b, such
// as the gateway whose address the calls come from.
func tapRemoteCaller(t *testing.T, g gatewayCase, url, how string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			execLoad(ctx, g.a, g.ns, g.client, "-n", "5", "-timeout", "5s", url)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	evs, err := tapEventsIn(g.b.Config, g.ns, "deployments", "hello", tapapi.Request{Direction: "inbound"}, 5)
	if err != nil {
		t.Fatalf("tap of b's hello (%s): %v", how, err)
	}
	starts, from := 0, ""
	for _, e := range evs {
		if e.Type != tapapi.RequestStart {
			continue
		}
		starts++
		from = tapview.Name(e.Source)
		want := tapapi.Peer{Addr: e.Source.Addr, Identity: g.id("client"), Cluster: trustDomain, Namespace: g.ns, WorkloadKind: tapapi.KindServiceAccount, WorkloadName: "client"}
		if e.Source != want {
			t.Errorf("tap of b's hello (%s): source %+v, want %+v", how, e.Source, want)
		}
	}
	if starts == 0 {
		t.Errorf("tap of b's hello (%s): no request in %d events", how, len(evs))
	}
	t.Logf("tap of b's hello (%s): %d requests, from %s", how, starts, from)
}
