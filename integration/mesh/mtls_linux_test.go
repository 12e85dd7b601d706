package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/integration/packetcapture"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestMeshMTLS runs the control plane from deploy/ and meshed workloads
// whose traffic the CNI plugin redirects, and proves on the real cluster:
// meshed pods talk mTLS (the wire carries only TLS records, metrics name
// both identities), a plain client still reaches a meshed server, a pod
// reaches itself through its Service over mTLS, scaling spreads requests,
// a deleted endpoint leaves the proxies within 1 s, the proxies ride out
// destination and identity outages, and a rotated issuer keeps old and
// new certificates valid.
func TestMeshMTLS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to capture packets in a pod's network namespace")
	}
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Install(t) // takes the CNI lock: plexus-system is ours too
	cp := deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	ns := c.Namespace(t, "mesh", meshLabels)

	deploy(t, c, ns, "hello", 1, meshed, podSpec("hello", "serve", ":8080"))
	service(t, c, ns, "hello", 8080)
	url := "http://hello." + ns + ".svc.cluster.local/"
	deploy(t, c, ns, "client", 1, meshed, podSpec("client", "poll", "-interval=50ms", "-new-conn", url))
	deploy(t, c, ns, "plain", 1, unmeshed, podSpec("plain", "poll", "-interval=200ms", url))
	for _, d := range []string{"hello", "client", "plain"} {
		c.WaitDeploymentReady(t, ns, d, 3*time.Minute)
	}
	client, plain := pods(t, c, ns, "client")[0], pods(t, c, ns, "plain")[0]
	server := pods(t, c, ns, "hello")[0]
	waitAnswers(t, c, ns, client.Name, 10)
	waitAnswers(t, c, ns, plain.Name, 3)

	t.Run("wire carries only TLS between meshed pods", func(t *testing.T) {
		capture, err := packetcapture.Start(clustercni.PodNetns(t, string(server.UID)), "eth0", 8080)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // Sleep: the capture's length: what both clients send in 2s is what is checked
		segs := capture.Stop()
		fromClient, fromPlain := flowsFrom(segs, client.Status.PodIP), flowsFrom(segs, plain.Status.PodIP)
		if len(fromClient) == 0 || len(fromPlain) == 0 {
			t.Fatalf("captured %d segments from the meshed client and %d from the plain one; want both", len(fromClient), len(fromPlain))
		}
		if err := packetcapture.OnlyTLS(fromClient); err != nil {
			t.Errorf("meshed client -> server: %v", err)
		}
		// The control: the same capture sees the plain client's HTTP.
		if err := packetcapture.OnlyTLS(fromPlain); err == nil {
			t.Errorf("plain client -> server looked like TLS: the capture proves nothing")
		}
	})

	t.Run("metrics name both identities", func(t *testing.T) {
		clientID := "spiffe://" + trustDomain + "/ns/" + ns + "/sa/client"
		serverID := "spiffe://" + trustDomain + "/ns/" + ns + "/sa/hello"
		in := proxyMetrics(t, c, ns, server.Name)
		wantSeries(t, in, "request_total", `direction="inbound"`, `tls="true"`, `client_id="`+clientID+`"`)
		wantSeries(t, in, "request_total", `direction="inbound"`, `tls="false"`)
		out := proxyMetrics(t, c, ns, client.Name)
		wantSeries(t, out, "request_total", `direction="outbound"`, `tls="true"`, `server_id="`+serverID+`"`)
		// For the record (targets are checked by benchmarks, not here).
		t.Logf("proxy RSS in a real pod: server %s, client %s", rss(in), rss(out))
	})

	t.Run("a pod reaches itself through its Service", func(t *testing.T) {
		selfCalls(t, c, ns)
	})

	t.Run("scaling 1 to 3 spreads requests", func(t *testing.T) {
		c.Kubectl(t, "-n", ns, "scale", "deployment/hello", "--replicas=3")
		c.WaitDeploymentReady(t, ns, "hello", 2*time.Minute)
		// The clock starts when the EndpointSlice lists three ready
		// endpoints, as for the deletion below.
		clustertest.WaitFor(t, time.Minute, "three ready endpoints of hello", func(ctx context.Context) (bool, error) {
			n := 0
			for _, p := range pods(t, c, ns, "hello") {
				if readyInSlices(ctx, c, ns, "hello", p.Name) {
					n++
				}
			}
			return n == 3, nil
		})
		ready := time.Now()
		var lines []pollLine
		allThree := func(context.Context) (bool, error) {
			lines = since(pollLog(t, c, ns, client.Name), ready)
			hosts, _ := servedBy(lines)
			return len(hosts) == 3, nil
		}
		err := clustertest.Poll(clustertest.Context(t, 10*time.Second), 200*time.Millisecond, allThree)
		if err != nil && proxyHoldsReady(t, c, ns, client.Name, "hello", 3) {
			// The proxy knows all three, yet one took no request: its first
			// answer was slow (on a loaded node, one scheduling delay is
			// enough), a peak that wins no pick until it decays (tower's
			// peak EWMA, τ = 10s). That is the balancer working; wait for
			// the decay, and say so.
			hosts, _ := servedBy(lines)
			t.Logf("10s after the EndpointSlice listed them, the client's proxy held three ready endpoints but only %v answered (each first: %v); the estimates:%s; waiting up to a minute for the decay",
				hosts, firstAnswers(lines, ready), proxyEndpoints(t, c, ns, client.Name))
			err = clustertest.Poll(clustertest.Context(t, time.Minute), time.Second, allThree)
		}
		if err != nil {
			hosts, errs := servedBy(lines)
			var addrs []string
			for _, p := range pods(t, c, ns, "hello") {
				addrs = append(addrs, p.Name+"="+p.Status.PodIP)
			}
			// One fact per line: CI shows the first lines of a failure, cut.
			t.Fatalf("10s after the EndpointSlice listed three ready endpoints, %d answers came from %v and %d failed (first: %.100q)\n  pods: %s\n  each server's first answer ever, from then: %v\n  the client's proxy holds:%s",
				len(lines), hosts, len(errs), errs, strings.Join(addrs, " "), firstAnswers(pollLog(t, c, ns, client.Name), ready), proxyEndpoints(t, c, ns, client.Name))
		}
		t.Logf("all three servers answered %s after the EndpointSlice listed them (each first: %v)", time.Since(ready).Round(10*time.Millisecond), firstAnswers(lines, ready))
	})

	t.Run("a deleted endpoint leaves the proxies within 1s", func(t *testing.T) {
		victim := pods(t, c, ns, "hello")[0].Name
		deleted := time.Now()
		ctx := clustertest.Context(t, time.Minute)
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The clock starts when the EndpointSlice says the pod is not ready:
		// how soon the controller-manager writes that is not the mesh's doing
		// (on a loaded machine it has taken seconds).
		clustertest.WaitFor(t, 30*time.Second, victim+" not ready in the EndpointSlice", func(ctx context.Context) (bool, error) {
			return !readyInSlices(ctx, c, ns, "hello", victim), nil
		})
		gone := time.Now()
		t.Logf("the EndpointSlice marked %s not ready %s after its deletion", victim, gone.Sub(deleted).Round(10*time.Millisecond))
		time.Sleep(4 * time.Second) // Sleep: the answers of the 3s after the 1s allowed are what is checked
		lines := since(pollLog(t, c, ns, client.Name), gone.Add(time.Second))
		hosts, errs := servedBy(lines)
		if hosts[victim] != 0 {
			t.Errorf("%d requests reached %s more than 1s after its EndpointSlice marked it not ready", hosts[victim], victim)
		}
		if len(errs) != 0 {
			t.Errorf("requests failed after the deletion: %v", errs)
		}
		if len(lines) < 20 {
			t.Errorf("only %d answers in the 3s after the deletion", len(lines))
		}
	})

	t.Run("destination down: known services keep working", func(t *testing.T) {
		// Known: every replica, the deleted one's replacement too, has
		// answered, so each holds its port's policy (the port is not
		// declared, so the policy is fetched on the first request, and a
		// pod that never had one refuses: fail closed).
		from := time.Now()
		clustertest.WaitFor(t, 30*time.Second, "an answer from every hello replica", func(context.Context) (bool, error) {
			hosts, _ := servedBy(since(pollLog(t, c, ns, client.Name), from))
			for _, p := range pods(t, c, ns, "hello") {
				if hosts[p.Name] == 0 {
					return false, nil
				}
			}
			return true, nil
		})
		scale(t, c, controlNamespace, "plexus-destination", 0)
		down := time.Now()
		time.Sleep(3 * time.Second) // Sleep: 3s of answers with destination down are what is checked
		lines := since(pollLog(t, c, ns, client.Name), down)
		hosts, errs := servedBy(lines)
		if len(errs) != 0 || len(hosts) == 0 {
			t.Errorf("with destination down: %d answers from %v, errors %v", len(lines), hosts, errs)
		}
		scale(t, c, controlNamespace, "plexus-destination", 1)
	})

	t.Run("identity down: existing certs work, new pods wait with a reason", func(t *testing.T) {
		scale(t, c, controlNamespace, "plexus-identity", 0)
		down := time.Now()
		deploy(t, c, ns, "late", 1, meshed, podSpec("late", "serve", ":8080"))
		time.Sleep(10 * time.Second) // Sleep: the late pod must stay uncertified all along; nothing marks "still waiting"
		hosts, errs := servedBy(since(pollLog(t, c, ns, client.Name), down))
		if len(errs) != 0 || len(hosts) == 0 {
			t.Errorf("with identity down: answers from %v, errors %v", hosts, errs)
		}
		late := latePod(t, c, ns)
		if clustertest.PodReady(late) {
			t.Fatalf("pod %s became ready without an identity service", late.Name)
		}
		logs, _ := c.Logs(clustertest.Context(t, 30*time.Second), ns, late.Name, "plexus-proxy")
		if !regexp.MustCompile(`(?i)identity`).MatchString(logs) {
			t.Errorf("the waiting proxy's log does not say it waits for identity:\n%s", logs)
		}
		scale(t, c, controlNamespace, "plexus-identity", 1)
		c.WaitDeploymentReady(t, ns, "late", 2*time.Minute)
	})

	t.Run("rotated issuer: new certs chain to the anchor, old ones stay valid", func(t *testing.T) {
		before := servingIssuer(t, pods(t, c, ns, "late")[0].Status.PodIP, cp.AnchorsPEM)
		cp.rotateIssuer(t, c)
		c.Kubectl(t, "-n", ns, "rollout", "restart", "deployment/late")
		c.Kubectl(t, "-n", ns, "rollout", "status", "deployment/late", "--timeout=2m")
		after := servingIssuer(t, pods(t, c, ns, "late")[0].Status.PodIP, cp.AnchorsPEM)
		if after.Equal(before) {
			t.Errorf("a pod started after the rotation still has a certificate from the old issuer %s", before.Subject)
		}
		// Pods certified by the old issuer still serve the meshed client.
		now := time.Now()
		time.Sleep(2 * time.Second) // Sleep: the client's answers over 2s are what is checked
		if hosts, errs := servedBy(since(pollLog(t, c, ns, client.Name), now)); len(errs) != 0 || len(hosts) == 0 {
			t.Errorf("after rotation: answers from %v, errors %v", hosts, errs)
		}
	})
}

// selfCalls runs two replicas of a Service whose pods call that Service,
// each with a server listening on its pod IP only: the balancer sends
// about half of each pod's requests to the pod itself. Its proxy's mTLS
// connection to its own address leaves by lo, so only the self-call rule
// brings it to the inbound side, which dials the server from the inbound
// source. No request may fail, both replicas answer each pod, and every
// answer a pod's server gave was counted at its inbound side as mTLS from
// the workload's own identity (none in plaintext).
func selfCalls(t *testing.T, c *clustertest.Cluster, ns string) {
	t.Helper()
	const name = "selfcall"
	url := "http://" + name + "." + ns + ".svc.cluster.local/"
	spec := podSpec(name, "poll", "-interval=50ms", "-new-conn", url)
	spec.Containers = append(spec.Containers, corev1.Container{
		Name: "server", Image: testappImage, ImagePullPolicy: corev1.PullNever,
		Args: []string{"serve", "$(POD_IP):8080"},
		Env:  []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
	})
	deploy(t, c, ns, name, 2, meshed, spec)
	service(t, c, ns, name, 8080)
	c.WaitDeploymentReady(t, ns, name, 3*time.Minute)
	ps := pods(t, c, ns, name)
	if len(ps) != 2 {
		t.Fatalf("%d running %s pods, want 2", len(ps), name)
	}
	bothAnswer := func(lines []pollLine) bool {
		hosts, _ := servedBy(lines)
		return hosts[ps[0].Name] > 0 && hosts[ps[1].Name] > 0
	}
	clustertest.WaitFor(t, time.Minute, "each pod answered by both replicas, itself among them", func(context.Context) (bool, error) {
		return bothAnswer(pollLog(t, c, ns, ps[0].Name)) && bothAnswer(pollLog(t, c, ns, ps[1].Name)), nil
	})
	from := time.Now()
	time.Sleep(3 * time.Second) // Sleep: 3s of each pod's calls are what is checked

	for _, p := range ps {
		recent := since(pollLog(t, c, ns, p.Name), from)
		if _, errs := servedBy(recent); len(errs) != 0 {
			t.Errorf("%s: %d of %d requests failed once both replicas answered: %v", p.Name, len(errs), len(recent), errs)
		}
		if len(recent) < 20 {
			t.Errorf("%s: %d answers in 3s; want 20 or more (one every 50ms)", p.Name, len(recent))
		}
		if bothAnswer(recent) {
			continue
		}
		// Both replicas answered this pod before; one slow answer since
		// (on a loaded node, one scheduling delay is enough) is a peak
		// that wins no pick of the two until it decays (tower's peak
		// EWMA, τ = 10s: a peak 30 times the other's RTT, ~35s). That is
		// the balancer working, as long as its proxy holds both ready:
		// wait for the decay, and say so.
		hosts, _ := servedBy(recent)
		if !proxyHoldsReady(t, c, ns, p.Name, name, 2) {
			t.Errorf("%s: answers in 3s by %v, and its proxy does not hold both replicas ready:%s", p.Name, hosts, proxyEndpoints(t, c, ns, p.Name))
			continue
		}
		t.Logf("%s: answers in 3s by %v though its proxy holds both ready; the estimates:%s; waiting up to a minute for the decay", p.Name, hosts, proxyEndpoints(t, c, ns, p.Name))
		err := clustertest.Poll(clustertest.Context(t, time.Minute), time.Second, func(context.Context) (bool, error) {
			return bothAnswer(since(pollLog(t, c, ns, p.Name), from)), nil
		})
		if err != nil {
			hosts, _ := servedBy(since(pollLog(t, c, ns, p.Name), from))
			t.Errorf("%s: answered by %v in the minute after both had answered; want both replicas:%s", p.Name, hosts, proxyEndpoints(t, c, ns, p.Name))
		}
	}
	served := map[string]int{} // answers per serving pod, over every log
	for _, p := range ps {
		lines := pollLog(t, c, ns, p.Name)
		if _, errs := servedBy(since(lines, from)); len(errs) != 0 && !t.Failed() {
			t.Errorf("%s: %d requests failed once both replicas answered: %v", p.Name, len(errs), errs)
		}
		hosts, _ := servedBy(lines)
		for h, n := range hosts {
			served[h] += n
		}
	}
	// Read after the logs: the counters are at least what the logs show.
	id := "spiffe://" + trustDomain + "/ns/" + ns + "/sa/" + name
	for _, p := range ps {
		m := proxyMetrics(t, c, ns, p.Name)
		target := `target_addr="` + net.JoinHostPort(p.Status.PodIP, "8080") + `"`
		mtls := sumSeries(t, m, "request_total", `direction="inbound"`, target, `tls="true"`, `client_id="`+id+`"`)
		plain := sumSeries(t, m, "request_total", `direction="inbound"`, target, `tls="false"`)
		if plain != 0 || mtls < float64(served[p.Name]) {
			t.Errorf("%s inbound: %v requests over mTLS from %s and %v in plaintext; want all of the %d its server answered (its own and its peer's) over mTLS",
				p.Name, mtls, id, plain, served[p.Name])
		}
		wantSeries(t, m, "request_total", `direction="outbound"`, `tls="true"`, `server_id="`+id+`"`)
	}
	c.Kubectl(t, "-n", ns, "scale", "deployment/"+name, "--replicas=0") // no load on the subtests after
}

// sumSeries sums the samples of metric whose lines carry every label (a
// metric without labels: its one sample).
func sumSeries(t *testing.T, metrics, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		all := true
		for _, want := range labels {
			all = all && strings.Contains(l, want)
		}
		if !all {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// waitAnswers waits until pod's poll log has n successful answers.
func waitAnswers(t *testing.T, c *clustertest.Cluster, ns, pod string, n int) {
	t.Helper()
	clustertest.WaitFor(t, time.Minute, fmt.Sprintf("%d answers in %s's log", n, pod), func(context.Context) (bool, error) {
		hosts, _ := servedBy(pollLog(t, c, ns, pod))
		total := 0
		for _, k := range hosts {
			total += k
		}
		return total >= n, nil
	})
}

func flowsFrom(segs []packetcapture.Segment, podIP string) []packetcapture.Segment {
	ip, err := netip.ParseAddr(podIP)
	if err != nil {
		return nil
	}
	var out []packetcapture.Segment
	for _, s := range segs {
		if s.Src.Addr() == ip || s.Dst.Addr() == ip {
			out = append(out, s)
		}
	}
	return out
}

// wantSeries fails unless some sample line of metric carries every label.
func wantSeries(t *testing.T, metrics, name string, labels ...string) {
	t.Helper()
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.Contains(l, name+"{") || strings.HasPrefix(l, "#") {
			continue
		}
		all := true
		for _, want := range labels {
			all = all && strings.Contains(l, want)
		}
		if all {
			return
		}
	}
	var have []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.Contains(l, name+"{") {
			have = append(have, l)
		}
	}
	t.Errorf("no %s series with %v; have:\n%s", name, labels, strings.Join(have, "\n"))
}

func latePod(t *testing.T, c *clustertest.Cluster, ns string) *corev1.Pod {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=late"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("want one late pod: %v, %v", list, err)
	}
	return &list.Items[0]
}

// servingIssuer handshakes with a meshed pod's proxy from the host as a
// mesh client would (our ALPN) and returns the issuer certificate the
// proxy presents, after checking its chain verifies to the anchors. The
// proxy then rejects us for having no client certificate; that is after
// it has shown its own.
func servingIssuer(t *testing.T, podIP, anchorsPEM string) *x509.Certificate {
	t.Helper()
	return servingChain(t, podIP, anchorsPEM)[1]
}

// servingChain is the chain a meshed pod's proxy presents on 8080 (leaf
// first), verified to the anchors.
func servingChain(t *testing.T, podIP, anchorsPEM string) []*x509.Certificate {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(anchorsPEM)) {
		t.Fatal("no anchors")
	}
	var chain []*x509.Certificate
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{"plexus.mtls.v1"},
		InsecureSkipVerify: true, // verified below against the anchors
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(podIP, "8080"), conf)
	if err == nil {
		conn.Close()
	}
	if len(chain) < 2 {
		t.Fatalf("handshake with %s showed %d certificates (err %v), want leaf and issuer", podIP, len(chain), err)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the certificate of %s does not chain to the anchors: %v", podIP, err)
	}
	return chain
}

// rss is the process_resident_memory_bytes sample of a metrics page, in MB.
func rss(metrics string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, "process_resident_memory_bytes "); ok {
			var b float64
			if _, err := fmt.Sscanf(v, "%g", &b); err == nil {
				return fmt.Sprintf("%.1f MB", b/1e6)
			}
		}
	}
	return "unknown"
}

// readyInSlices reports whether pod is a ready endpoint in any EndpointSlice
// of Service svc.
func readyInSlices(ctx context.Context, c *clustertest.Cluster, ns, svc, pod string) bool {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return true // unknown: keep waiting
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Name == pod && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}
