package mesh

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// TestMulticluster (issue 27's T1-T6, T8 and T9, on the two local
// clusters of make test's pair cycle, their networks flat): Plexus in both
// under one trust anchor (an issuer each) with trust domains of their own
// (a's cluster.local, b's b.cluster.local), the multicluster extension in both,
// and a links to b with plexusctl multicluster link (credentials from b's
// TokenRequest API). Exporting hello in b mirrors it in a within 5 s;
// a's client then reaches b's hello pods at their own addresses over mTLS,
// each side's metrics naming the other's identity; a policy in b that
// names a's client admits it and refuses a's other account with 403, and
// b's own client, the same service account name in the same namespace,
// too: the trust domain tells the clusters apart. A StatefulSet's pods
// answer by name (testHeadless). A federated Service spans a's and b's
// hello and fails over to a when b goes (testFederated). Then, the
// networks hierarchical, the
// same through b's gateway, and its failures (testGatewayMode). A
// collision is reported by check; un-exporting deletes the mirror, and
// unlink deletes the Link, its mirrors and credentials, and revokes the
// token.
func TestMulticluster(t *testing.T) {
	p := linkPair(t, "--token-lifetime=10m")
	a, b, ctlA := p.a, p.b, p.ctlA
	ctx := clustertest.Context(t, 15*time.Minute)
	// T8 throughout: the link's 10-minute token is renewed every 12 s.
	a.Kubectl(t, "-n", mc.Namespace, "patch", "deployment", "plexus-service-mirror", "--type=json",
		`-p=[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--token-renew-at=0.02"}]`)
	a.Kubectl(t, "-n", mc.Namespace, "rollout", "status", "deployment/plexus-service-mirror", "--timeout=2m")

	// The workloads: hello in b; client and other in a, in a namespace
	// of the same name; and a local Service in a that takes the name
	// b's web would be mirrored as.
	ns := b.Namespace(t, "mc-flat", meshLabels)
	a.NamespaceNamed(t, ns, meshLabels)
	deploy(t, b, ns, "hello", 2, meshed, podSpec("hello", "serve", ":8080"))
	deploy(t, b, ns, "client", 1, meshed, podSpec("client", "serve", ":8080"))
	service(t, b, ns, "hello", 8080)
	service(t, b, ns, "web", 8080)
	deploy(t, a, ns, "client", 1, meshed, podSpec("client", "serve", ":8080"))
	deploy(t, a, ns, "other", 1, meshed, podSpec("other", "serve", ":8080"))
	service(t, a, ns, "web-b", 8080)
	localWeb, err := a.Client.CoreV1().Services(ns).Get(ctx, "web-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		c    *clustertest.Cluster
		name string
	}{{b, "hello"}, {b, "client"}, {a, "client"}, {a, "other"}} {
		w.c.WaitDeploymentReady(t, ns, w.name, 3*time.Minute)
	}
	client, other, clientInB := pods(t, a, ns, "client")[0].Name, pods(t, a, ns, "other")[0].Name, pods(t, b, ns, "client")[0].Name

	var check string

	// T1: export.
	setExported(t, b, ns, "hello", true)
	within(t, "export: mirror hello-b in a", 5*time.Second, mirrorIn(a, ns, "hello-b"), nil)
	firstMirror, err := a.Client.CoreV1().Services(ns).Get(ctx, "hello-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	firstToken := linkedToken(t, a)

	// T2: a's client reaches b's hello pods, pod to pod, over mTLS.
	helloPods := map[string]string{} // name → IP
	for _, p := range pods(t, b, ns, "hello") {
		helloPods[p.Name] = p.Status.PodIP
	}
	url := "http://hello-b." + ns + ".svc.cluster.local/"
	var res loadResult
	within(t, "a's client reaches b's hello through the mirror", 30*time.Second, func() bool {
		res, err = execLoad(ctx, a, ns, client, "-n", "20", "-timeout", "5s", url)
		return err == nil && res.Statuses["200"] == 20
	}, func() string { return briefResult(res) + " " + errString(err) })
	for server := range res.Servers {
		if _, ok := helloPods[server]; !ok {
			t.Errorf("answered by %s, not one of b's hello pods %v", server, helloPods)
		}
	}
	sets, err := proxyEndpointSets(ctx, a, ns, client)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, set := range sets {
		if set.Labels["service"] == "hello-b" {
			for _, ep := range set.Endpoints {
				held = append(held, ep.Addr)
			}
		}
	}
	for _, ip := range helloPods {
		if !slices.Contains(held, ip+":8080") {
			t.Errorf("client's proxy holds %v for hello-b, want b's pod %s:8080 among them (pod to pod, no gateway)", held, ip)
		}
	}
	id := func(sa string) string { return "spiffe://" + trustDomain + "/ns/" + ns + "/sa/" + sa }
	idB := func(sa string) string { return "spiffe://" + trustDomainB + "/ns/" + ns + "/sa/" + sa }
	wantSeries(t, proxyMetrics(t, a, ns, client), "request_total", `direction="outbound"`, `tls="true"`, `server_id="`+idB("hello")+`"`)
	for name := range res.Servers {
		wantSeries(t, proxyMetrics(t, b, ns, name), "request_total", `direction="inbound"`, `tls="true"`, `client_id="`+id("client")+`"`)
	}

	// b's tap names a's client by its identity and cluster.
	installViz(t, b, p.ctlB, "--trust-domain="+trustDomainB)
	tapRemoteCaller(t, gatewayCase{a: a, b: b, ns: ns, client: client, id: id}, url, "pod to pod")

	// T2: a policy in b naming a's client.
	policy := strings.NewReplacer("{{ns}}", ns).Replace(strings.Join([]string{
		authzServer("hello-http", "app: hello", 8080, "HTTP/1"),
		authzObject("MeshTLSAuthentication", "client-in-a", nil, `
  identities: ["`+id("client")+`"]`),
		authzPolicy("hello-http", "Server/hello-http", false, "MeshTLSAuthentication/client-in-a"),
	}, "---"))
	if out, err := kubectlOutput(ctx, b, policy, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the policy in b: %v\n%s", err, out)
	}
	within(t, "b's policy refuses a's other account", 30*time.Second, func() bool {
		res, err = execLoad(ctx, a, ns, other, "-n", "5", "-timeout", "5s", url)
		return err == nil && res.Statuses["403"] == 5 && res.Errors["plexus-proxy-error: unauthorized"] == 5
	}, func() string { return briefResult(res) + " " + errString(err) })
	if res, err = execLoad(ctx, a, ns, client, "-n", "20", "-timeout", "5s", url); err != nil || res.Statuses["200"] != 20 {
		t.Errorf("a's client under b's policy: %s %v", briefResult(res), err)
	}
	// T4: b's own sa/client is not a's.
	if res, err = execLoad(ctx, b, ns, clientInB, "-n", "5", "-timeout", "5s", "http://hello."+ns+".svc.cluster.local/"); err != nil ||
		res.Statuses["403"] != 5 || res.Errors["plexus-proxy-error: unauthorized"] != 5 {
		t.Errorf("b's own client (%s) under a policy naming a's: %s %v, want 403×5", idB("client"), briefResult(res), err)
	}
	wantSeries(t, proxyMetrics(t, b, ns, clientInB), "request_total", `direction="outbound"`, `tls="true"`, `server_id="`+idB("hello")+`"`)

	// T8: the token is renewed in place: the mirror stays, traffic flows.
	within(t, "the link's token renewed (12 s after it was minted)", 30*time.Second, func() bool { return linkedToken(t, a) != firstToken }, nil)
	if cur, err := a.Client.CoreV1().Services(ns).Get(ctx, "hello-b", metav1.GetOptions{}); err != nil || cur.UID != firstMirror.UID {
		t.Errorf("the mirror hello-b was replaced when the token was renewed: %v", err)
	}
	within(t, "after the renewal: a's client still reaches b", 10*time.Second, func() bool {
		res, err = execLoad(ctx, a, ns, client, "-n", "20", "-timeout", "5s", url)
		return err == nil && res.Statuses["200"] == 20
	}, func() string { return briefResult(res) + " " + errString(err) })

	g := gatewayCase{a: a, b: b, ns: ns, client: client, other: other, hello: helloPods, id: id, ctlA: ctlA}
	// T9: a StatefulSet, its pods by name.
	testHeadless(t, g)
	// T5: a federated Service, its failover.
	testFederated(t, g)
	// T3: gateway mode, the networks hierarchical.
	testGatewayMode(t, g)

	// A collision: b's web would be mirrored as a's own web-b.
	setExported(t, b, ns, "web", true)
	within(t, "collision: multicluster check names it", 10*time.Second, func() bool {
		check, err = ctlA("multicluster", "check")
		return err != nil && strings.Contains(check, "NameCollision")
	}, func() string { return check })
	if cur, err := a.Client.CoreV1().Services(ns).Get(ctx, "web-b", metav1.GetOptions{}); err != nil || cur.UID != localWeb.UID || cur.Labels[mc.LinkLabel] != "" {
		t.Errorf("a's own web-b was touched: %v %v", cur, err)
	}
	setExported(t, b, ns, "web", false)

	// T1: un-export, export again, unlink.
	setExported(t, b, ns, "hello", false)
	within(t, "un-export: mirror hello-b deleted", 5*time.Second, goneIn(a, ns, "hello-b"), nil)
	setExported(t, b, ns, "hello", true)
	within(t, "export again: mirror hello-b in a", 5*time.Second, mirrorIn(a, ns, "hello-b"), nil)
	creds, err := a.Client.CoreV1().Secrets(mc.Namespace).Get(ctx, "cluster-credentials-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := ctlA("multicluster", "unlink", "--cluster-name", "b", "--remote-kubeconfig", b.Kubeconfig); err != nil {
		t.Fatalf("multicluster unlink: %v\n%s", err, out)
	}
	t.Logf("unlink: %v", time.Since(start).Round(time.Millisecond))
	if !goneIn(a, ns, "hello-b")() {
		t.Error("unlink left the mirror hello-b")
	}
	if _, err := a.Client.CoreV1().Secrets(mc.Namespace).Get(ctx, "cluster-credentials-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("unlink left the credentials: %v", err)
	}
	if _, err := a.Client.CoreV1().Services(ns).Get(ctx, "web-b", metav1.GetOptions{}); err != nil {
		t.Errorf("unlink deleted a's own web-b: %v", err)
	}
	within(t, "unlink: b no longer accepts the link's token", 10*time.Second, func() bool {
		review, err := b.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tokenOf(t, creds.Data[mc.CredentialsKey])}}, metav1.CreateOptions{})
		return err == nil && !review.Status.Authenticated
	}, nil)
	// T1: destination no longer checks b: its gateway's and API server's
	// series are gone.
	within(t, "unlink: a's destination stops checking b", 5*time.Second, func() bool {
		return !destinationHas(t, a, `plexus_destination_gateway_healthy{cluster="b"}`) &&
			!destinationHas(t, a, `plexus_destination_remote_api_healthy{cluster="b"}`)
	}, nil)
}

// linkedPair is the two local clusters, their networks flat, with Plexus
// in both under one trust anchor (an issuer each) and trust domains of
// their own (a's cluster.local, b's b.cluster.local), the multicluster
// extension in both, and a linked to b as a user does it (plexusctl
// multicluster link, with linkArgs).
type linkedPair struct {
	a, b       *clustertest.Cluster
	ctlA, ctlB plexusctl
}

func linkPair(t *testing.T, linkArgs ...string) linkedPair {
	t.Helper()
	a, b := clustertest.Pair(t)
	envA, envB := clustercni.Read(t), clustercni.ReadB(t)
	mode := clustertest.PairMode(t, "flat")
	t.Cleanup(func() { clustertest.PairMode(t, mode) })

	identity := sharedAnchor(t)
	ctlA, _ := installAllKeepingCNI(t, a, envA, identity("a", trustDomain)...)
	ctlB := newPlexusctl(t, b)
	envB.KeepNodeCNI(t)
	installAll(t, b, envB, ctlB, append(identity("b", trustDomainB), "--trust-domain="+trustDomainB)...)
	ctx := clustertest.Context(t, 10*time.Minute)
	for _, c := range []struct {
		cluster *clustertest.Cluster
		ctl     plexusctl
	}{{a, ctlA}, {b, ctlB}} {
		manifests, err := c.ctl("multicluster", "install")
		if err != nil {
			t.Fatalf("multicluster install: %v\n%s", err, manifests)
		}
		if out, err := kubectlOutput(ctx, c.cluster, manifests, "apply", "-f", "-"); err != nil {
			t.Fatalf("applying the multicluster extension: %v\n%s", err, out)
		}
		t.Cleanup(func() {
			// The Links while the service mirror runs (their finalizer
			// needs it), then the rest.
			_, _ = c.cluster.TryKubectl("delete", "links.multicluster.plexus.dev", "--all", "-n", mc.Namespace, "--timeout=30s")
			objs, err := c.ctl("multicluster", "uninstall")
			if err != nil {
				t.Errorf("multicluster uninstall: %v\n%s", err, objs)
				return
			}
			if out, err := kubectlOutput(context.Background(), c.cluster, objs, "delete", "--ignore-not-found", "--timeout=60s", "-f", "-"); err != nil {
				t.Logf("deleting the multicluster extension: %v: %.500s", err, out)
			}
		})
	}
	// The link, as a user makes it: b gives a an account of its own
	// (allow), and the link's token is minted for it.
	allow, err := ctlB("multicluster", "allow", "--service-account-name", linkAccount)
	if err != nil {
		t.Fatalf("multicluster allow: %v\n%s", err, allow)
	}
	if out, err := kubectlOutput(ctx, b, allow, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying multicluster allow in b: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := kubectlOutput(context.Background(), b, allow, "delete", "--ignore-not-found", "-f", "-"); err != nil {
			t.Logf("deleting multicluster allow's objects: %v: %.500s", err, out)
		}
	})
	link, err := ctlB(append([]string{"multicluster", "link", "--cluster-name", "b", "--api-server-address", "https://" + clustertest.BAPIServer,
		"--service-account-name", linkAccount}, linkArgs...)...)
	if err != nil {
		t.Fatalf("multicluster link: %v\n%s", err, link)
	}
	if out, err := kubectlOutput(ctx, a, link, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the link: %v\n%s", err, out)
	}
	var check string
	within(t, "Link b: multicluster check passes (Ready, a common anchor)", 60*time.Second, func() bool {
		check, err = ctlA("multicluster", "check")
		return err == nil
	}, func() string { return check })
	t.Logf("multicluster check:\n%s", check)
	return linkedPair{a: a, b: b, ctlA: ctlA, ctlB: ctlB}
}

// trustDomainB is b's trust domain.
const trustDomainB = "b.cluster.local"

// linkAccount is the account b allows for a's link (multicluster allow).
const linkAccount = "a-reader"

// sharedAnchor makes one trust anchor and, per cluster, an issuer under
// it that may sign identities of that cluster's trust domain only, and
// returns the plexusctl install flags for a cluster's.
func sharedAnchor(t *testing.T) func(cluster, td string) []string {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: trustDomain})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	anchors := filepath.Join(dir, "anchors.pem")
	writeFile(t, anchors, pki.EncodeCerts(anchor.Cert))
	return func(cluster, td string) []string {
		issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: td, OnlyTrustDomain: true})
		if err != nil {
			t.Fatal(err)
		}
		key, err := pki.EncodeKey(issuer.Key)
		if err != nil {
			t.Fatal(err)
		}
		crt, keyFile := filepath.Join(dir, cluster+"-issuer.pem"), filepath.Join(dir, cluster+"-issuer-key.pem")
		writeFile(t, crt, pki.EncodeCerts(issuer.Cert))
		writeFile(t, keyFile, key)
		return []string{"--identity-trust-anchors-file=" + anchors, "--identity-issuer-certificate-file=" + crt, "--identity-issuer-key-file=" + keyFile}
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// setExported labels (or unlabels) Service ns/name of c for flat mode.
func setExported(t *testing.T, c *clustertest.Cluster, ns, name string, exported bool) {
	t.Helper()
	mode := ""
	if exported {
		mode = mc.ExportedRemoteDiscovery
	}
	setExport(t, c, ns, name, mode)
}

// setExport sets Service ns/name's export label to mode ("": removes it).
func setExport(t *testing.T, c *clustertest.Cluster, ns, name, mode string) {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Labels == nil {
		svc.Labels = map[string]string{}
	}
	if mode != "" {
		svc.Labels[mc.ExportedLabel] = mode
	} else {
		delete(svc.Labels, mc.ExportedLabel)
	}
	if _, err := c.Client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mirrorIn reports whether c holds Link b's mirror ns/name, port 80.
func mirrorIn(c *clustertest.Cluster, ns, name string) func() bool {
	return func() bool {
		svc, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && svc.Labels[mc.RemoteDiscoveryLabel] == "b" && svc.Labels[mc.LinkLabel] == "b" &&
			len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == 80 && svc.Spec.Ports[0].TargetPort == intstr.FromInt32(80)
	}
}

func goneIn(c *clustertest.Cluster, ns, name string) func() bool {
	return func() bool {
		_, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
}

// linkedToken is the token of a's credentials for Link b.
func linkedToken(t *testing.T, a *clustertest.Cluster) string {
	t.Helper()
	creds, err := a.Client.CoreV1().Secrets(mc.Namespace).Get(context.Background(), "cluster-credentials-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokenOf(t, creds.Data[mc.CredentialsKey])
}

// tokenOf is the bearer token of a kubeconfig's current user.
func tokenOf(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

// within fails the test unless cond holds within d, with last's account
// of the last try (if given), and logs how long it took.
func within(t *testing.T, what string, d time.Duration, cond func() bool, last func() string) {
	t.Helper()
	start := time.Now()
	if !eventually.Holds(d, cond) {
		detail := ""
		if last != nil {
			detail = ": " + last()
		}
		t.Fatalf("%s: not within %v%s", what, d, detail)
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
