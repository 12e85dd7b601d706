package destination

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// testPKI is a mesh's trust anchor and issuer (mesh/identity/pki, as identity
// runs them).
type testPKI struct {
	anchor pki.CA
	roots  *x509.CertPool
	issuer *pki.Issuer
}

func newTestPKI(t testing.TB, trustDomain string) *testPKI {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: trustDomain})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor.Cert)
	issuer, err := pki.NewIssuer([]*x509.Certificate{anchor.Cert}, anchor.Key, roots, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{anchor: anchor, roots: roots, issuer: issuer}
}

// leaf is a workload certificate for id, as identity issues it.
func (p *testPKI) leaf(t testing.TB, id spiffe.ID) tls.Certificate {
	t.Helper()
	key, der, err := pki.NewCSR(id)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.issuer.Issue(csr, pki.Leaf{ID: id, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// leafURIs is a client certificate signed by the anchor with the URI SANs
// uris: what identity never issues.
func (p *testPKI) leafURIs(t testing.TB, uris ...string) tls.Certificate {
	t.Helper()
	key, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.anchor.Cert, &key.PublicKey, p.anchor.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serverCreds are destination's: its own certificate, TLS 1.3, client
// certificates verified if given (control/destinationcmd serverTLS).
func (p *testPKI) serverCreds(t testing.TB) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{p.leaf(t, spiffe.New("cluster.local", "plexus-system", "plexus-destination"))},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: p.roots})
}

// presenting are client credentials presenting cert (none when nil)
// whatever the server's acceptable CAs, as a proxy does
// (mesh/identity/mtls.ClientConfig's GetClientCertificate).
func presenting(cert *tls.Certificate) credentials.TransportCredentials {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} // the server's identity is not what these tests check
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return credentials.NewTLS(cfg)
}

var (
	podNetwork = &net.TCPAddr{IP: net.ParseIP("10.1.0.9"), Port: 40000}
	webID      = spiffe.New("cluster.local", "ns", "web")
)

const refusedMetric = "plexus_destination_refused_streams_total"

// firstAnswer opens each streaming RPC of the Destination API (the
// inbound policy of pod ns/web port 8080) and returns, per rpc label,
// the error of its first message (nil: answered).
func firstAnswer(t testing.TB, c pb.DestinationClient) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	path := &pb.GetDestination{Path: "web.ns.svc.cluster.local:80", ContextToken: `{"ns":"ns"}`}
	recv := func(st interface{ RecvMsg(any) error }, err error, m any) error {
		if err != nil {
			return err
		}
		return st.RecvMsg(m)
	}
	out := map[string]error{}
	st, err := c.Get(ctx, path)
	out[rpcGet] = recv(st, err, new(pb.Update))
	sp, err := c.GetProfile(ctx, path)
	out[rpcGetProfile] = recv(sp, err, new(pb.DestinationProfile))
	so, err := c.GetOutboundPolicy(ctx, path)
	out[rpcGetOutboundPolicy] = recv(so, err, new(pb.OutboundPolicy))
	si, err := c.GetInboundPolicy(ctx, &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web", Port: 8080})
	out[rpcGetInboundPolicy] = recv(si, err, new(pb.InboundPolicy))
	return out
}

func callerFixture() []any {
	return []any{service("ns", "web", "10.96.0.10", svcPort("http", 80, intstr.FromInt32(8080))), inboundPod(nil)}
}

// TestCallerIdentity: on the pod network, only a caller with a verified
// mesh identity of this trust domain is answered; every refusal is
// Unauthenticated and counted by reason.
func TestCallerIdentity(t *testing.T) {
	mesh := newTestPKI(t, "cluster.local")
	otherMesh := newTestPKI(t, "other.example")
	web := mesh.leaf(t, webID)
	c := startCluster(t, clusterOptions{crds: true, inbound: true, callers: true, peerAddr: podNetwork,
		serverCreds: mesh.serverCreds(t), clientCreds: presenting(&web)}, callerFixture()...)

	t.Run("its mesh identity", func(t *testing.T) {
		for rpc, err := range firstAnswer(t, c.dst) {
			if err != nil {
				t.Errorf("%s: %v", rpc, err)
			}
		}
	})
	foreignTD := mesh.leaf(t, spiffe.New("other.example", "ns", "web"))
	notSPIFFE := mesh.leafURIs(t, "https://web.ns.example")
	twoIDs := mesh.leafURIs(t, webID.String(), "spiffe://cluster.local/ns/ns/sa/admin")
	for _, tc := range []struct {
		name     string
		cert     *tls.Certificate
		contains string
		reason   string
	}{
		{"no client certificate", nil, "this caller presented none", reasonNoCertificate},
		{"another trust domain, same anchors", &foreignTD, "spiffe://other.example/ns/ns/sa/web is not of this mesh's trust domain cluster.local", reasonTrustDomain},
		{"not a SPIFFE ID", &notSPIFFE, "names no mesh identity", reasonInvalidIdentity},
		{"two URI SANs", &twoIDs, "2 URI SANs", reasonInvalidIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]float64{}
			for _, rpc := range []string{rpcGet, rpcGetProfile, rpcGetOutboundPolicy, rpcGetInboundPolicy} {
				before[rpc] = metricValue(t, c.reg, refusedMetric, tc.reason, rpc)
			}
			for rpc, err := range firstAnswer(t, c.dial(presenting(tc.cert))) {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.contains) {
					t.Errorf("%s: %v, want Unauthenticated with %q", rpc, err, tc.contains)
				}
				if got := metricValue(t, c.reg, refusedMetric, tc.reason, rpc); got != before[rpc]+1 {
					t.Errorf("%s: %s{reason=%q} = %v, want %v", rpc, refusedMetric, tc.reason, got, before[rpc]+1)
				}
			}
		})
	}
	t.Run("another mesh's certificate", func(t *testing.T) {
		// Not verified by the anchors: the handshake itself fails, and no
		// stream is ever opened.
		cert := otherMesh.leaf(t, spiffe.New("other.example", "ns", "web"))
		for rpc, err := range firstAnswer(t, c.dial(presenting(&cert))) {
			if code := status.Code(err); code != codes.Unavailable {
				t.Errorf("%s: %v, want Unavailable (a failed handshake)", rpc, err)
			}
		}
	})
}

// TestCallerLoopback: a caller on loopback (a port-forward into
// destination's pod) is answered without a certificate, but gets no
// pod's inbound policy.
func TestCallerLoopback(t *testing.T) {
	mesh := newTestPKI(t, "cluster.local")
	for _, addr := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.1", "127.0.0.53"} {
		t.Run(addr, func(t *testing.T) {
			c := startCluster(t, clusterOptions{crds: true, inbound: true, callers: true, peerAddr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 40000},
				serverCreds: mesh.serverCreds(t), clientCreds: presenting(nil)}, callerFixture()...)
			for rpc, err := range firstAnswer(t, c.dst) {
				if rpc == rpcGetInboundPolicy {
					if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "no verified TLS client certificate") {
						t.Errorf("%s: %v, want PermissionDenied", rpc, err)
					}
					if got := metricValue(t, c.reg, refusedMetric, reasonNoCertificate, rpc); got != 1 {
						t.Errorf("%s: %s = %v, want 1", rpc, refusedMetric, got)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", rpc, err)
				}
			}
		})
	}
}

// TestCallerWithoutTLS: a server without TLS (RequireCallerIdentity off)
// answers callers without certificates, bounding each address.
func TestCallerWithoutTLS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequireCallerIdentity, cfg.VerifyInboundCaller, cfg.MaxStreamsPerIdentity = false, false, 1
	c := startCluster(t, clusterOptions{crds: true, inbound: true, callers: true, peerAddr: podNetwork, cfg: &cfg, clientCreds: insecure.NewCredentials()}, callerFixture()...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := openGet(t, ctx, c.dst)
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	_, err := openGet(t, ctx, c.dst).Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the caller at 10.1.0.9 without a certificate has 1 destination streams open") {
		t.Errorf("second stream of the address: %v, want ResourceExhausted", err)
	}
	if got := metricValue(t, c.reg, refusedMetric, reasonAddressLimit, rpcGet); got != 1 {
		t.Errorf("%s{reason=%s} = %v, want 1", refusedMetric, reasonAddressLimit, got)
	}
}

func openGet(t testing.TB, ctx context.Context, c pb.DestinationClient) grpc.ServerStreamingClient[pb.Update] {
	t.Helper()
	st, err := c.Get(ctx, &pb.GetDestination{Path: "web.ns.svc.cluster.local:80"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCallerStreamLimit: one identity (all its proxies together) may have
// MaxStreamsPerIdentity streams open, every loopback caller together
// MaxLoopbackStreams; the next is ResourceExhausted and counted, other
// callers are not affected, and a stream that ends frees its place.
func TestCallerStreamLimit(t *testing.T) {
	mesh := newTestPKI(t, "cluster.local")
	cfg := DefaultConfig()
	cfg.MaxStreamsPerIdentity, cfg.MaxLoopbackStreams = 3, 2

	t.Run("identity", func(t *testing.T) {
		web, other := mesh.leaf(t, webID), mesh.leaf(t, spiffe.New("cluster.local", "ns", "other"))
		c := startCluster(t, clusterOptions{crds: true, callers: true, peerAddr: podNetwork, cfg: &cfg,
			serverCreds: mesh.serverCreds(t), clientCreds: presenting(&web)}, callerFixture()...)
		// Two proxies of the same service account share its streams.
		replica := c.dial(presenting(&web))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		firstCtx, closeFirst := context.WithCancel(ctx)
		for i, client := range []pb.DestinationClient{c.dst, replica, replica} {
			sctx := ctx
			if i == 0 {
				sctx = firstCtx
			}
			if _, err := openGet(t, sctx, client).Recv(); err != nil {
				t.Fatalf("stream %d: %v", i+1, err)
			}
		}
		_, err := openGet(t, ctx, c.dst).Recv()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), webID.String()+" has 3 destination streams open, as many as it may (--max-streams-per-identity)") {
			t.Fatalf("fourth stream: %v, want ResourceExhausted", err)
		}
		if got := metricValue(t, c.reg, refusedMetric, reasonIdentityLimit, rpcGet); got != 1 {
			t.Errorf("%s{reason=%s} = %v, want 1", refusedMetric, reasonIdentityLimit, got)
		}
		if _, err := openGet(t, ctx, c.dial(presenting(&other))).Recv(); err != nil {
			t.Errorf("another identity's stream: %v", err)
		}
		closeFirst()
		if !eventually.Holds(wait, func() bool {
			_, err = openGet(t, ctx, c.dst).Recv()
			return err == nil
		}) {
			t.Fatalf("a stream after one ended: %v", err)
		}
	})

	t.Run("loopback", func(t *testing.T) {
		c := startCluster(t, clusterOptions{crds: true, callers: true, peerAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, cfg: &cfg,
			serverCreds: mesh.serverCreds(t), clientCreds: presenting(nil)}, callerFixture()...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		another := c.dial(presenting(nil)) // another port-forward
		for i, client := range []pb.DestinationClient{c.dst, another} {
			if _, err := openGet(t, ctx, client).Recv(); err != nil {
				t.Fatalf("stream %d: %v", i+1, err)
			}
		}
		_, err := openGet(t, ctx, another).Recv()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "(--max-loopback-streams)") {
			t.Fatalf("third stream: %v, want ResourceExhausted", err)
		}
		if got := metricValue(t, c.reg, refusedMetric, reasonLoopbackLimit, rpcGet); got != 1 {
			t.Errorf("%s{reason=%s} = %v, want 1", refusedMetric, reasonLoopbackLimit, got)
		}
		// A loopback caller with a certificate counts as its identity.
		web := mesh.leaf(t, webID)
		if _, err := openGet(t, ctx, c.dial(presenting(&web))).Recv(); err != nil {
			t.Errorf("a loopback caller with a certificate: %v", err)
		}
	})
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8086": true, "127.255.0.1:1": true, "[::1]:8086": true, "[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:8086": false, "[::2]:1": false, "[fe80::1%eth0]:1": false, "bufconn": false, "": false, "127.0.0.1": false, "localhost:80": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

type countingLog struct{ n int }

func (l *countingLog) Warn(string, ...any) { l.n++ }

func TestEveryLog(t *testing.T) {
	var l countingLog
	e := newEveryLog(&l, time.Minute)
	now := time.Unix(1000, 0)
	e.now = func() time.Time { return now }
	e.warn("a", "m")
	e.warn("a", "m")
	e.warn("b", "m")
	if l.n != 2 {
		t.Fatalf("logged %d times, want 2 (once per key)", l.n)
	}
	now = now.Add(time.Minute)
	e.warn("a", "m")
	if l.n != 3 {
		t.Errorf("logged %d times, want 3 (again after the interval)", l.n)
	}
}
