package chaintest

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/plexus-mesh/plexus/cni-plugin/plugin"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

const (
	gatewayV4   = "10.244.77.1"   // the bridge's address in the node netns
	skippedDst  = "10.244.77.250" // extra address of the server pod, in skip-outbound-subnets
	skippedDst6 = "fd00:10:244:77::fa"
)

// expectArrival dials and asserts which listener got the connection and,
// for redirected connections, the original destination.
func expectArrival(t *testing.T, rec *recorder, token, wantListener string, wantOrig netip.AddrPort, dialFn func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err = dialFn(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // Sleep: paces the retries (a dial may run bash) while e.g. IPv6 addresses are still tentative
	}
	if err != nil {
		t.Fatalf("dial (%s): %v", token, err)
	}
	a, ok := rec.find(token)
	if !ok {
		t.Fatalf("connection %s never arrived at any listener", token)
	}
	if a.listener != wantListener {
		t.Fatalf("connection %s arrived at %s, want %s", token, a.listener, wantListener)
	}
	if wantOrig.IsValid() {
		if a.origErr != nil {
			t.Fatalf("connection %s: reading SO_ORIGINAL_DST: %v", token, a.origErr)
		}
		if a.origDst != wantOrig {
			t.Fatalf("connection %s: SO_ORIGINAL_DST = %v, want %v", token, a.origDst, wantOrig)
		}
	}
}

func noPlexusRules(t *testing.T, p *pod, dualStack bool) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		if v6 && !dualStack {
			continue
		}
		if out := natSave(t, p.ns, v6); strings.Contains(out, "PLEXUS") || strings.Contains(out, "plexus/") {
			t.Fatalf("pod %s (v6=%v) has plexus rules:\n%s", p.name, v6, out)
		}
	}
}

func TestChain(t *testing.T) {
	e := newEnv(t, nil)
	skipSubnets := skippedDst + "/32"
	if e.dualStack {
		skipSubnets += "," + skippedDst6 + "/128"
	}
	e.createPod("server", false, nil)
	e.createPod("web", true, map[string]string{
		podcontract.AnnotationSkipOutboundPorts:   "9001",
		podcontract.AnnotationSkipOutboundSubnets: skipSubnets,
		podcontract.AnnotationSkipInboundPorts:    "9002",
		podcontract.AnnotationSkipInboundSubnets:  gatewayV4 + "/32",
	})
	server := e.mustAddPod("server", e.chain)
	web := e.mustAddPod("web", e.chain)
	runIn(t, server.ns, "ip", "addr", "add", skippedDst+"/24", "dev", "eth0")
	if e.dualStack {
		if !server.v6.IsValid() || !web.v6.IsValid() {
			t.Fatalf("dual-stack chain gave no IPv6 addresses (server %v, web %v)", server.v6, web.v6)
		}
		runIn(t, server.ns, "ip", "-6", "addr", "add", skippedDst6+"/64", "dev", "eth0", "nodad")
	}

	rec := &recorder{}
	for _, l := range []struct{ n, addr, label string }{
		{"tcp4", ":8080", "server:8080"}, {"tcp4", ":9001", "server:9001"},
	} {
		rec.listen(t, server.ns, l.n, l.addr, l.label)
	}
	for _, l := range []struct{ n, addr, label string }{
		{"tcp4", ":4140", "web:outbound"}, {"tcp4", ":4143", "web:inbound"}, {"tcp4", ":4191", "web:admin"},
		{"tcp4", ":9002", "web:9002"}, {"tcp4", ":8080", "web:8080"},
	} {
		rec.listen(t, web.ns, l.n, l.addr, l.label)
	}
	if e.dualStack {
		rec.listen(t, server.ns, "tcp6", ":8080", "server:8080/v6")
		rec.listen(t, web.ns, "tcp6", ":4140", "web:outbound/v6")
		rec.listen(t, web.ns, "tcp6", ":4143", "web:inbound/v6")
		rec.listen(t, web.ns, "tcp6", ":4191", "web:admin/v6")
		rec.listen(t, web.ns, "tcp6", ":9002", "web:9002/v6")
		rec.listen(t, web.ns, "tcp6", ":8080", "web:8080/v6")
	}
	ap := func(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
	none := netip.AddrPort{}

	// Every "is not redirected" case below is only meaningful if the rules
	// exist, so this is checked first and stops the test.
	out := natSave(t, web.ns, false)
	for _, want := range []string{":PLEXUS_INBOUND", ":PLEXUS_OUTPUT", "-j PLEXUS_INBOUND", "-j PLEXUS_OUTPUT", "--to-ports 4140", "--to-ports 4143",
		"-s 127.0.0.6/32 -o lo", "! -d 127.0.0.0/8 -o lo -m owner --uid-owner 2102"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the meshed pod's IPv4 nat table lacks %q:\n%s", want, out)
		}
	}
	if e.dualStack {
		out6 := natSave(t, web.ns, true)
		if !strings.Contains(out6, "-d "+skippedDst6+"/128") || !strings.Contains(out6, "--to-ports 4140") || strings.Contains(out6, skippedDst) ||
			!strings.Contains(out6, "-s ::1/128 -o lo") || !strings.Contains(out6, "! -d ::1/128 -o lo -m owner --uid-owner 2102") {
			t.Fatalf("the meshed pod's IPv6 nat table has the wrong rules:\n%s", out6)
		}
	}

	t.Run("non-meshed pod has no rules", func(t *testing.T) { noPlexusRules(t, server, e.dualStack) })

	t.Run("outbound is redirected to 4140 with the original destination", func(t *testing.T) {
		dst := ap(server.v4, 8080)
		expectArrival(t, rec, "out-1", "web:outbound", dst, func() error { return dial(web.ns, dst, "out-1") })
	})
	t.Run("proxy UID is not redirected", func(t *testing.T) {
		dst := ap(server.v4, 8080)
		expectArrival(t, rec, "uid-2102", "server:8080", none, func() error { return dialAs(web.ns, 2102, 1000, dst, "uid-2102") })
	})
	t.Run("proxy GID is not redirected", func(t *testing.T) {
		dst := ap(server.v4, 8080)
		expectArrival(t, rec, "gid-2102", "server:8080", none, func() error { return dialAs(web.ns, 1000, 2102, dst, "gid-2102") })
	})
	t.Run("another UID in a child process is redirected", func(t *testing.T) {
		dst := ap(server.v4, 8080)
		expectArrival(t, rec, "uid-1000", "web:outbound", dst, func() error { return dialAs(web.ns, 1000, 1000, dst, "uid-1000") })
	})
	t.Run("skipped outbound port is not redirected", func(t *testing.T) {
		dst := ap(server.v4, 9001)
		expectArrival(t, rec, "port-9001", "server:9001", none, func() error { return dial(web.ns, dst, "port-9001") })
	})
	t.Run("skipped outbound subnet is not redirected", func(t *testing.T) {
		dst := ap(netip.MustParseAddr(skippedDst), 8080)
		expectArrival(t, rec, "subnet-out", "server:8080", none, func() error { return dial(web.ns, dst, "subnet-out") })
	})
	t.Run("loopback is not redirected", func(t *testing.T) {
		dst := ap(netip.MustParseAddr("127.0.0.1"), 8080)
		expectArrival(t, rec, "lo-1", "web:8080", none, func() error { return dial(web.ns, dst, "lo-1") })
	})
	t.Run("inbound is redirected to 4143 with the original port", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "in-1", "web:inbound", dst, func() error { return dial(server.ns, dst, "in-1") })
	})
	t.Run("admin port is not redirected", func(t *testing.T) {
		dst := ap(web.v4, 4191)
		expectArrival(t, rec, "admin-1", "web:admin", none, func() error { return dial(server.ns, dst, "admin-1") })
	})
	t.Run("skipped inbound port is not redirected", func(t *testing.T) {
		dst := ap(web.v4, 9002)
		expectArrival(t, rec, "port-9002", "web:9002", none, func() error { return dial(server.ns, dst, "port-9002") })
	})
	t.Run("skipped inbound source subnet is not redirected", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "subnet-in", "web:8080", none, func() error { return dial(e.node, dst, "subnet-in") })
	})
	t.Run("IPv6 outbound and inbound are redirected", func(t *testing.T) {
		if !e.dualStack {
			t.Skip("IPv6 is disabled on this machine")
		}
		out := ap(server.v6, 8080)
		expectArrival(t, rec, "out-v6", "web:outbound/v6", out, func() error { return dial(web.ns, out, "out-v6") })
		skipped := ap(netip.MustParseAddr(skippedDst6), 8080)
		expectArrival(t, rec, "subnet-out-v6", "server:8080/v6", none, func() error { return dial(web.ns, skipped, "subnet-out-v6") })
		in := ap(web.v6, 8080)
		expectArrival(t, rec, "in-v6", "web:inbound/v6", in, func() error { return dial(server.ns, in, "in-v6") })
	})

	// A pod calling itself through a Service: its proxy's connection to
	// its own address leaves by lo and never passes PREROUTING.
	inboundSource := netip.MustParseAddr("127.0.0.6")
	t.Run("proxy UID to the pod's own address goes to inbound with the original destination", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "self-2102", "web:inbound", dst, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, dst, "self-2102") })
	})
	t.Run("proxy UID from the inbound source reaches the app", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "inbound-src", "web:8080", none, func() error { return dialFrom(web.ns, 2102, 2102, inboundSource, dst, "inbound-src") })
	})
	t.Run("another UID to the pod's own address is not redirected", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "self-1000", "web:8080", none, func() error { return dialAs(web.ns, 1000, 1000, dst, "self-1000") })
	})
	t.Run("proxy GID alone to the pod's own address is not redirected", func(t *testing.T) {
		dst := ap(web.v4, 8080)
		expectArrival(t, rec, "self-gid", "web:8080", none, func() error { return dialAs(web.ns, 1000, 2102, dst, "self-gid") })
	})
	t.Run("proxy UID to loopback is not redirected", func(t *testing.T) {
		dst := ap(netip.MustParseAddr("127.0.0.1"), 8080)
		expectArrival(t, rec, "self-lo", "web:8080", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, dst, "self-lo") })
	})
	t.Run("proxy UID to the pod's own skipped inbound port and admin port is not redirected", func(t *testing.T) {
		skip := ap(web.v4, 9002)
		expectArrival(t, rec, "self-9002", "web:9002", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, skip, "self-9002") })
		admin := ap(web.v4, 4191)
		expectArrival(t, rec, "self-admin", "web:admin", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, admin, "self-admin") })
	})
	t.Run("IPv6 self-call rules", func(t *testing.T) {
		if !e.dualStack {
			t.Skip("IPv6 is disabled on this machine")
		}
		dst := ap(web.v6, 8080)
		expectArrival(t, rec, "self-2102-v6", "web:inbound/v6", dst, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, dst, "self-2102-v6") })
		expectArrival(t, rec, "inbound-src-v6", "web:8080/v6", none, func() error {
			return dialFrom(web.ns, 2102, 2102, netip.MustParseAddr("::1"), dst, "inbound-src-v6")
		})
		expectArrival(t, rec, "self-1000-v6", "web:8080/v6", none, func() error { return dialFrom(web.ns, 1000, 1000, netip.Addr{}, dst, "self-1000-v6") })
		lo := ap(netip.MustParseAddr("::1"), 8080)
		expectArrival(t, rec, "self-lo-v6", "web:8080/v6", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, lo, "self-lo-v6") })
		skip := ap(web.v6, 9002)
		expectArrival(t, rec, "self-9002-v6", "web:9002/v6", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, skip, "self-9002-v6") })
		admin := ap(web.v6, 4191)
		expectArrival(t, rec, "self-admin-v6", "web:admin/v6", none, func() error { return dialFrom(web.ns, 2102, 2102, netip.Addr{}, admin, "self-admin-v6") })
	})

	t.Run("CHECK passes on intact rules", func(t *testing.T) {
		if err := e.check(web); err != nil {
			t.Fatalf("CHECK meshed pod: %v", err)
		}
		if err := e.check(server); err != nil {
			t.Fatalf("CHECK non-meshed pod: %v", err)
		}
	})
	t.Run("a proxy without the inbound source gets no self-call rules", func(t *testing.T) {
		e.createPodWithProxyEnv("old-proxy", true, nil, nil)
		old := e.mustAddPod("old-proxy", e.chain)
		for _, v6 := range []bool{false, true} {
			if v6 && !e.dualStack {
				continue
			}
			out := natSave(t, old.ns, v6)
			if !strings.Contains(out, "plexus/proxy-uid") || strings.Contains(out, "plexus/self-call") || strings.Contains(out, "plexus/inbound-to-app") {
				t.Errorf("pod injected before the inbound source (v6=%v): want the rules without the self-call ones:\n%s", v6, out)
			}
		}
		if err := e.check(old); err != nil {
			t.Fatalf("CHECK: %v", err)
		}
	})
	t.Run("a repeated ADD replaces the rules without duplicates", func(t *testing.T) {
		before := natSave(t, web.ns, false)
		if _, err := e.plexusOnly(web, "ADD", func() {}); err != nil {
			t.Fatalf("second ADD: %v", err)
		}
		after := natSave(t, web.ns, false)
		if n := strings.Count(after, "plexus/"); n != strings.Count(before, "plexus/") {
			t.Fatalf("rule count changed from %d to %d:\n%s", strings.Count(before, "plexus/"), n, after)
		}
		if err := e.check(web); err != nil {
			t.Fatalf("CHECK after a repeated ADD: %v", err)
		}
	})
	t.Run("CHECK fails after a rule is deleted by hand", func(t *testing.T) {
		runIn(t, web.ns, "iptables", "-w", "-t", "nat", "-D", "PLEXUS_OUTPUT", "-p", "tcp", "-m", "tcp", "--dport", "9001",
			"-m", "comment", "--comment", "plexus/skip-outbound-ports", "-j", "RETURN")
		err := e.check(web)
		var te *types.Error
		if !errors.As(err, &te) || te.Code != plugin.ErrCodeCheck ||
			!strings.Contains(te.Msg, "missing") || !strings.Contains(te.Msg, "--dport 9001") {
			t.Fatalf("CHECK after deleting the skip-outbound-ports rule: %v", err)
		}
		t.Logf("CHECK said: %s", te.Msg)
	})
	t.Run("DEL removes everything and a second DEL succeeds", func(t *testing.T) {
		if err := e.del(web); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		noPlexusRules(t, web, e.dualStack)
		if err := e.del(web); err != nil {
			t.Fatalf("second DEL: %v", err)
		}
	})
	t.Run("DEL succeeds when the netns is gone", func(t *testing.T) {
		e.createPod("gone", true, nil)
		gone := e.mustAddPod("gone", e.chain)
		_ = gone.ns.Close()
		if err := unmount(gone.ns); err != nil {
			t.Fatal(err)
		}
		if err := e.del(gone); err != nil {
			t.Fatalf("DEL with the netns gone: %v", err)
		}
	})
}

func TestMalformedAnnotationFailsAdd(t *testing.T) {
	e := newEnv(t, nil)
	e.createPod("bad", true, map[string]string{podcontract.AnnotationSkipOutboundPorts: "25,smtp"})
	p, err := e.addPod("bad", e.chain)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != plugin.ErrCodeBadAnnotation ||
		!strings.Contains(te.Msg, podcontract.AnnotationSkipOutboundPorts) || !strings.Contains(te.Msg, "smtp") {
		t.Fatalf("ADD with a malformed annotation: %v", err)
	}
	t.Logf("ADD said: %s", te.Msg)
	noPlexusRules(t, p, e.dualStack)
}

func TestPodNotFoundFailsAdd(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.addPod("never-created", e.chain)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != plugin.ErrCodeAPI || !strings.Contains(te.Msg, "not found") {
		t.Fatalf("ADD for a pod the API server does not know: %v", err)
	}
	noPlexusRules(t, p, e.dualStack)
}
