package metrics

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

func TestTargetAndAuthorityAreBounded(t *testing.T) {
	m := New(prometheus.NewRegistry(), 3)
	for i := range 3 {
		ap := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(80+i))
		if got := m.Target(Outbound, ap); got != ap.String() {
			t.Fatalf("target %d = %q", i, got)
		}
	}
	if got := m.Target(Outbound, netip.MustParseAddrPort("10.0.0.9:1")); got != Overflow {
		t.Errorf("4th target = %q, want overflow", got)
	}
	if got := m.Target(Outbound, netip.MustParseAddrPort("10.0.0.1:80")); got != "10.0.0.1:80" {
		t.Errorf("known target = %q", got)
	}
	if got := m.Target(Inbound, netip.MustParseAddrPort("10.0.0.9:1")); got != "10.0.0.9:1" {
		t.Errorf("inbound has its own budget, got %q", got)
	}
	for _, bad := range []string{"", "a b", "x\"y", strings.Repeat("a", 300), "h\n"} {
		if got := m.Authority(Inbound, bad); got != "invalid" {
			t.Errorf("Authority(%q) = %q", bad, got)
		}
	}
	if got := m.Authority(Inbound, "web.ns.svc.cluster.local:8080"); got != "web.ns.svc.cluster.local:8080" {
		t.Errorf("got %q", got)
	}
}

var tgt = netip.MustParseAddrPort("10.0.0.1:80")

func TestRequestClassification(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, 10)
	for _, c := range []struct {
		status       int
		grpc, reason string
	}{{200, "", ""}, {503, "", ""}, {200, "0", ""}, {200, "14", ""}, {200, "99", ""}, {502, "", "connect"}} {
		r := m.StartRequest(Outbound, tgt, "a", TLS{}, "", nil)
		r.Headers(c.status)
		r.Done(c.status, c.grpc, c.reason)
	}
	want := `
# HELP response_total HTTP responses the proxy completed.
# TYPE response_total counter
response_total{authority="a",classification="failure",client_id="",direction="outbound",dst_cluster="",error="",grpc_status="",server_id="",status_code="503",target_addr="10.0.0.1:80",tls="false"} 1
response_total{authority="a",classification="failure",client_id="",direction="outbound",dst_cluster="",error="",grpc_status="14",server_id="",status_code="200",target_addr="10.0.0.1:80",tls="false"} 1
response_total{authority="a",classification="failure",client_id="",direction="outbound",dst_cluster="",error="",grpc_status="other",server_id="",status_code="200",target_addr="10.0.0.1:80",tls="false"} 1
response_total{authority="a",classification="failure",client_id="",direction="outbound",dst_cluster="",error="connect",grpc_status="",server_id="",status_code="502",target_addr="10.0.0.1:80",tls="false"} 1
response_total{authority="a",classification="success",client_id="",direction="outbound",dst_cluster="",error="",grpc_status="",server_id="",status_code="200",target_addr="10.0.0.1:80",tls="false"} 1
response_total{authority="a",classification="success",client_id="",direction="outbound",dst_cluster="",error="",grpc_status="0",server_id="",status_code="200",target_addr="10.0.0.1:80",tls="false"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "response_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(Outbound, "10.0.0.1:80", "a", "false", "", "", "")); n != 6 {
		t.Errorf("request_total = %v", n)
	}
	if n := testutil.CollectAndCount(m.latency); n != 3 { // status 200, 503, 502
		t.Errorf("latency series = %d", n)
	}
}

func TestConnCounts(t *testing.T) {
	m := New(prometheus.NewRegistry(), 10)
	a, b := net.Pipe()
	id := spiffe.New("cluster.local", "shop", "web")
	c := m.TrackConn(a, Inbound, "t", PeerSrc, TLS{On: true, PeerID: m.PeerID(Inbound, id)})
	go func() { b.Write([]byte("hello")); io.ReadFull(b, make([]byte, 3)); b.Close() }()
	io.ReadFull(c, make([]byte, 5))
	c.Write([]byte("abc"))
	if v := testutil.ToFloat64(m.tcpConns.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), "")); v != 1 {
		t.Errorf("open connections = %v", v)
	}
	c.Fail()
	c.Close()
	c.Close()
	for name, want := range map[string]float64{
		"read": 5, "write": 3, "open": 1, "conns": 0, "closeFail": 1, "closeOK": 0,
	} {
		var got float64
		switch name {
		case "read":
			got = testutil.ToFloat64(m.tcpRead.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), ""))
		case "write":
			got = testutil.ToFloat64(m.tcpWrite.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), ""))
		case "open":
			got = testutil.ToFloat64(m.tcpOpen.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), ""))
		case "conns":
			got = testutil.ToFloat64(m.tcpConns.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), ""))
		case "closeFail":
			got = testutil.ToFloat64(m.tcpClose.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), "", "failure"))
		case "closeOK":
			got = testutil.ToFloat64(m.tcpClose.WithLabelValues(Inbound, "t", PeerSrc, "true", id.String(), "", "success"))
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestTLSLabelsAndBoundedIDs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, 2)
	ids := []spiffe.ID{spiffe.New("td", "a", "x"), spiffe.New("td", "b", "y"), spiffe.New("td", "c", "z")}
	if got := m.PeerID(Outbound, ids[0]); got != ids[0].String() {
		t.Errorf("PeerID = %q", got)
	}
	m.PeerID(Outbound, ids[1])
	if got := m.PeerID(Outbound, ids[2]); got != Overflow {
		t.Errorf("3rd id with a budget of 2 = %q, want overflow", got)
	}
	if got := m.PeerID(Outbound, spiffe.ID{}); got != "" {
		t.Errorf("zero id = %q", got)
	}
	m.StartRequest(Outbound, tgt, "a", TLS{On: true, PeerID: ids[0].String()}, "", nil)
	m.StartRequest(Inbound, tgt, "a", TLS{On: true, PeerID: ids[1].String()}, "", nil)
	// A linked cluster's endpoints: dst_cluster, bounded like the others.
	m.StartRequest(Outbound, tgt, "a", TLS{On: true, PeerID: ids[0].String()}, "east", nil)
	m.StartRequest(Outbound, tgt, "a", TLS{On: true, PeerID: ids[0].String()}, "west", nil)
	m.StartRequest(Outbound, tgt, "a", TLS{On: true, PeerID: ids[0].String()}, "north", nil)
	want := `
# HELP request_total HTTP requests the proxy received.
# TYPE request_total counter
request_total{authority="a",client_id="",direction="outbound",dst_cluster="",server_id="spiffe://td/ns/a/sa/x",target_addr="10.0.0.1:80",tls="true"} 1
request_total{authority="a",client_id="",direction="outbound",dst_cluster="east",server_id="spiffe://td/ns/a/sa/x",target_addr="10.0.0.1:80",tls="true"} 1
request_total{authority="a",client_id="",direction="outbound",dst_cluster="overflow",server_id="spiffe://td/ns/a/sa/x",target_addr="10.0.0.1:80",tls="true"} 1
request_total{authority="a",client_id="",direction="outbound",dst_cluster="west",server_id="spiffe://td/ns/a/sa/x",target_addr="10.0.0.1:80",tls="true"} 1
request_total{authority="a",client_id="spiffe://td/ns/b/sa/y",direction="inbound",dst_cluster="",server_id="",target_addr="10.0.0.1:80",tls="true"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "request_total"); err != nil {
		t.Error(err)
	}
	m.Refused(RefusedPlaintext)
	if v := testutil.ToFloat64(m.refused.WithLabelValues(RefusedPlaintext)); v != 1 {
		t.Errorf("inbound_refused_total = %v", v)
	}
}

// TestResetConnCountsAsFailure: a connection the peer resets is counted
// as a failed close without anyone calling Fail; one that ends with EOF
// is a success.
func TestResetConnCountsAsFailure(t *testing.T) {
	m := New(prometheus.NewRegistry(), 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, reset := range []bool{true, false} {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if reset {
			server.(*net.TCPConn).SetLinger(0) // close sends RST
		}
		server.Close()
		c := m.TrackConn(client, Outbound, "t", PeerDst, TLS{})
		if _, err := io.ReadAll(c); (err != nil) != reset {
			t.Errorf("reset=%v: read err = %v", reset, err)
		}
		c.Close()
	}
	for outcome, want := range map[string]float64{"failure": 1, "success": 1} {
		if got := testutil.ToFloat64(m.tcpClose.WithLabelValues(Outbound, "t", PeerDst, "false", "", "", outcome)); got != want {
			t.Errorf("tcp_close_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

// A connection's Series gives the same counts as no cache, whatever
// changes between its requests.
func TestSeriesCountsAsWithoutCache(t *testing.T) {
	cached, plain := prometheus.NewRegistry(), prometheus.NewRegistry()
	mc, mp := New(cached, 10), New(plain, 10)
	var s Series
	other := netip.MustParseAddrPort("10.0.0.2:80")
	for _, c := range []struct {
		dst          netip.AddrPort
		authority    string
		tls          TLS
		cluster      string
		status       int
		grpc, reason string
	}{
		{tgt, "a", TLS{}, "", 200, "", ""}, {tgt, "a", TLS{}, "", 200, "", ""}, {tgt, "a", TLS{}, "", 503, "", ""},
		{tgt, "b", TLS{}, "", 200, "", ""}, {other, "b", TLS{}, "", 200, "", ""}, {other, "b", TLS{On: true}, "", 200, "0", ""},
		{other, "b", TLS{On: true}, "", 200, "14", ""}, {tgt, "a", TLS{}, "", 502, "", "connect-refused"}, {tgt, "a", TLS{}, "", 200, "", ""},
		{tgt, "a", TLS{}, "east", 200, "", ""}, {tgt, "a", TLS{}, "east", 200, "", ""}, {tgt, "a", TLS{}, "", 200, "", ""},
	} {
		for _, m := range []struct {
			m *Metrics
			s *Series
		}{{mc, &s}, {mp, nil}} {
			r := m.m.StartRequest(Outbound, c.dst, c.authority, c.tls, c.cluster, m.s)
			r.Headers(c.status)
			r.Done(c.status, c.grpc, c.reason)
		}
	}
	// Latency sums differ by timing; the sample counts per series must not.
	if counts(t, cached) != counts(t, plain) {
		t.Errorf("latency sample counts with the cache:\n%s\nwithout:\n%s", counts(t, cached), counts(t, plain))
	}
	for _, name := range []string{"request_total", "response_total"} {
		want, _ := plain.Gather()
		var text strings.Builder
		for _, mf := range want {
			if mf.GetName() == name {
				expfmt.MetricFamilyToText(&text, mf)
			}
		}
		if err := testutil.GatherAndCompare(cached, strings.NewReader(text.String()), name); err != nil {
			t.Errorf("%s with the cache differs: %v", name, err)
		}
	}
}

// counts lists each response_latency_ms series with its sample count.
func counts(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != "response_latency_ms" {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Fprintf(&b, "%v %d\n", m.GetLabel(), m.GetHistogram().GetSampleCount())
		}
	}
	return b.String()
}
