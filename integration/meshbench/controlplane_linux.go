package meshbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/control/identity"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// The mTLS pair's control plane: the real identity and destination
// services, run in this process over a fake Kubernetes API that holds
// the two benchmark pods, the issuer Secret and a TokenReview answer for
// each pod's token. The proxies certify, resolve and verify peers exactly
// as in a cluster; only the API server is not real.
const (
	controlNamespace = "plexus-system"
	benchNamespace   = "meshbench"
	portIdentity     = 8086
	portDestination  = 8087
)

// benchPod is one side's pod as the control plane knows it.
type benchPod struct {
	name string
	addr net.IP
}

var (
	clientPod = benchPod{"client", clientAddr.Addr().AsSlice()}
	serverPod = benchPod{"server", serverAddr.Addr().AsSlice()}
)

// controlPlane runs until Close.
type controlPlane struct {
	anchor, issuer pki.CA
	anchorsPEM     []byte
	tokenDir       string
	cancel         context.CancelFunc
	stop           []func()
	errc           chan error
}

// startControlPlane serves identity and destination inside the server
// namespace, reachable from both namespaces at serverAddr.
func startControlPlane(t *Topology, dir string) (_ *controlPlane, err error) {
	anchor, issuer, err := pki.NewAnchorAndIssuer(spiffe.DefaultTrustDomain, time.Now())
	if err != nil {
		return nil, err
	}
	secret, err := identity.IssuerSecret(controlNamespace, identity.DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cp := &controlPlane{anchor: anchor, issuer: issuer, anchorsPEM: pki.EncodeCerts(anchor.Cert), cancel: cancel, errc: make(chan error, 4)}
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()
	if cp.tokenDir, err = writeTokens(dir); err != nil {
		return nil, err
	}
	client := fake.NewClientset(secret, namespace(controlNamespace), namespace(benchNamespace), pod(clientPod), pod(serverPod))
	client.PrependReactor("create", "tokenreviews", reviewToken)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	id, err := identity.New(identity.Config{TrustDomain: spiffe.DefaultTrustDomain, Namespace: controlNamespace},
		identity.Deps{Client: client, Metrics: prometheus.NewRegistry(), Log: log})
	if err != nil {
		return nil, err
	}
	go func() { cp.errc <- id.Run(ctx) }()
	if err := cp.waitReady(id.Ready); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	idLn, err := t.listenServer(portIdentity)
	if err != nil {
		return nil, err
	}
	go func() { cp.errc <- id.Serve(ctx, idLn) }()

	dst, err := destination.New(destination.DefaultConfig(), client, prometheus.NewRegistry(), log)
	if err != nil {
		return nil, err
	}
	rc := destination.RouteClients{Gateway: gwfake.NewSimpleClientset(), Dynamic: dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Discovery: client.Discovery()}
	if err := dst.WatchRoutes(rc); err != nil {
		return nil, err
	}
	if err := dst.WatchInbound(rc); err != nil {
		return nil, err
	}
	go func() { cp.errc <- dst.Run(ctx) }()
	if err := cp.waitReady(dst.Ready); err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	dstTLS, err := destinationTLS(anchor, issuer)
	if err != nil {
		return nil, err
	}
	dstLn, err := t.listenServer(portDestination)
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(dstTLS)))
	pb.RegisterDestinationServer(gs, dst)
	go gs.Serve(dstLn)
	cp.stop = append(cp.stop, gs.Stop)
	return cp, nil
}

// Env is the proxy environment that makes one side's proxy a meshed pod's.
func (cp *controlPlane) Env(p benchPod) []string {
	return []string{
		"PLEXUS_PROXY_IDENTITY_ADDR=" + net.JoinHostPort(serverAddr.Addr().String(), fmt.Sprint(portIdentity)),
		"PLEXUS_PROXY_DESTINATION_ADDR=" + net.JoinHostPort(serverAddr.Addr().String(), fmt.Sprint(portDestination)),
		"PLEXUS_PROXY_TRUST_ANCHORS=" + string(cp.anchorsPEM),
		"PLEXUS_PROXY_IDENTITY_TOKEN_FILE=" + filepath.Join(cp.tokenDir, p.name),
		"PLEXUS_PROXY_POD_NAMESPACE=" + benchNamespace,
		"PLEXUS_PROXY_POD_NAME=" + p.name,
		"PLEXUS_PROXY_SERVICE_ACCOUNT=" + p.name,
	}
}

// Close stops both services.
func (cp *controlPlane) Close() {
	for _, stop := range cp.stop {
		stop()
	}
	cp.cancel()
}

func (t *Topology) listenServer(port int) (net.Listener, error) {
	var ln net.Listener
	err := t.serverNS.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("%s:%d", serverAddr.Addr(), port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on :%d in %s: %w", port, t.ServerNetns, err)
	}
	return ln, nil
}

// destinationTLS is the destination's serving configuration, as
// destinationcmd's: its certificate for plexus-destination from the
// issuer, client certificates verified when given.
func destinationTLS(anchor, issuer pki.CA) (*tls.Config, error) {
	roots := x509.NewCertPool()
	roots.AddCert(anchor.Cert)
	iss, err := pki.NewIssuer([]*x509.Certificate{issuer.Cert}, issuer.Key, roots, time.Now())
	if err != nil {
		return nil, err
	}
	id := spiffe.New(spiffe.DefaultTrustDomain, controlNamespace, "plexus-destination")
	key, der, err := pki.NewCSR(id)
	if err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, err
	}
	leaf, err := iss.Issue(csr, pki.Leaf{ID: id, Lifetime: 24 * time.Hour, ClockSkew: time.Minute})
	if err != nil {
		return nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{leaf.Raw, issuer.Cert.Raw}, PrivateKey: key, Leaf: leaf}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    roots,
	}, nil
}

// writeTokens writes each pod's "projected token", readable by the proxy
// UID; reviewToken maps it back to the pod's service account.
func writeTokens(dir string) (string, error) {
	tokens := filepath.Join(dir, "tokens")
	if err := os.MkdirAll(tokens, 0o755); err != nil {
		return "", err
	}
	for _, p := range []benchPod{clientPod, serverPod} {
		if err := os.WriteFile(filepath.Join(tokens, p.name), []byte(tokenOf(p.name)), 0o644); err != nil {
			return "", err
		}
	}
	return tokens, nil
}

func tokenOf(sa string) string { return "meshbench-token-" + sa }

// reviewToken answers a TokenReview as the API server would for the
// benchmark pods' tokens, and refuses any other.
func reviewToken(action k8stesting.Action) (bool, runtime.Object, error) {
	tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
	for _, p := range []benchPod{clientPod, serverPod} {
		if tr.Spec.Token == tokenOf(p.name) {
			tr.Status = authnv1.TokenReviewStatus{
				Authenticated: true,
				Audiences:     tr.Spec.Audiences,
				User:          authnv1.UserInfo{Username: "system:serviceaccount:" + benchNamespace + ":" + p.name},
			}
			return true, tr, nil
		}
	}
	tr.Status = authnv1.TokenReviewStatus{Error: "unknown token"}
	return true, tr, nil
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// pod is a running, ready, meshed pod with its own service account.
func pod(p benchPod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: p.name, Labels: map[string]string{"app": p.name}},
		Spec: corev1.PodSpec{
			ServiceAccountName: p.name,
			Containers:         []corev1.Container{{Name: p.name}, {Name: meshpod.ProxyContainerName}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      p.addr.String(),
			PodIPs:     []corev1.PodIP{{IP: p.addr.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// waitReady polls ready for up to 30 s, and fails at once if a service
// stopped.
func (cp *controlPlane) waitReady(ready func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case runErr := <-cp.errc:
			return fmt.Errorf("stopped: %w", runErr)
		default:
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("not ready after 30s"), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
