package mccli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/control/cli/extension"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// remoteWithExtension is a fake linked cluster with the remote-access
// account, whose TokenRequests it records and answers with "tok".
func remoteWithExtension(reqs *[]*authenticationv1.TokenRequest) *fake.Clientset {
	remote := fake.NewSimpleClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: RemoteAccessAccount}})
	remote.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		*reqs = append(*reqs, req)
		req.Status = authenticationv1.TokenRequestStatus{Token: "tok", ExpirationTimestamp: metav1.NewTime(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))}
		return true, req, nil
	})
	return remote
}

func decodeAll(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := extension.Decode("output", b)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		out = append(out, &unstructured.Unstructured{Object: o})
	}
	return out
}

// TestLink: link mints a token of the remote-access account bound to a
// new Secret in the linked cluster, and prints a credentials Secret (the
// API server address given, the kubeconfig's CA, the token, the trust
// domain of the linked install) and a Link naming it and the binding.
func TestLink(t *testing.T) {
	var reqs []*authenticationv1.TokenRequest
	remote := remoteWithExtension(&reqs)
	l := Linker{Remote: remote, Config: &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("the CA")}},
		Installed: func(context.Context) (install.Config, error) { return install.Config{TrustDomain: "b.example"}, nil }}
	var out bytes.Buffer
	if err := l.Link(context.Background(), LinkOptions{ClusterName: "b", APIServer: "https://10.214.0.250:6443", TokenLifetime: time.Hour}, &out); err != nil {
		t.Fatal(err)
	}
	bindings, err := remote.CoreV1().Secrets(mc.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(bindings.Items) != 1 || !strings.HasPrefix(bindings.Items[0].Name, "plexus-mc-link-b-") {
		t.Fatalf("binding Secrets in the linked cluster: %v %v", bindings, err)
	}
	binding := bindings.Items[0].Name
	if len(reqs) != 1 || *reqs[0].Spec.ExpirationSeconds != 3600 || reqs[0].Spec.BoundObjectRef == nil ||
		reqs[0].Spec.BoundObjectRef.Kind != "Secret" || reqs[0].Spec.BoundObjectRef.Name != binding {
		t.Fatalf("TokenRequests %+v, want one of 3600 s bound to Secret %s", reqs, binding)
	}
	objs := decodeAll(t, out.Bytes())
	if len(objs) != 2 || objs[0].GetKind() != "Secret" || objs[1].GetKind() != mc.LinkKind {
		t.Fatalf("printed %s", out.String())
	}
	var secret corev1.Secret
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &secret); err != nil {
		t.Fatal(err)
	}
	if secret.Name != "cluster-credentials-b" || secret.Namespace != mc.Namespace || string(secret.Type) != mc.CredentialsSecretType ||
		secret.Labels[mc.ClusterNameLabel] != "b" || secret.Annotations[mc.TrustDomainAnnotation] != "b.example" ||
		secret.Annotations[TokenBindingAnnotation] != binding {
		t.Errorf("credentials Secret %+v", secret.ObjectMeta)
	}
	cfg, err := clientcmd.Load(secret.Data[mc.CredentialsKey])
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if c := cfg.Clusters[ctx.Cluster]; c.Server != "https://10.214.0.250:6443" || string(c.CertificateAuthorityData) != "the CA" || cfg.AuthInfos[ctx.AuthInfo].Token != "tok" {
		t.Errorf("kubeconfig %+v %+v", c, cfg.AuthInfos[ctx.AuthInfo])
	}
	if spec := objs[1].Object["spec"].(map[string]any); spec["clusterName"] != "b" || spec["credentialsSecret"] != "cluster-credentials-b" ||
		objs[1].GetAnnotations()[TokenBindingAnnotation] != binding {
		t.Errorf("Link %v", objs[1].Object)
	}
}

// TestLinkRefuses: without the extension in the linked cluster, or with
// its install unreadable, link says so and creates nothing there; bad
// options are named.
func TestLinkRefuses(t *testing.T) {
	ok := func(context.Context) (install.Config, error) {
		return install.Config{TrustDomain: "cluster.local"}, nil
	}
	bare := fake.NewSimpleClientset()
	err := Linker{Remote: bare, Config: &rest.Config{}, Installed: ok}.Link(context.Background(), LinkOptions{ClusterName: "b", TokenLifetime: time.Hour}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "plexusctl multicluster install") {
		t.Errorf("no extension: %v", err)
	}
	var reqs []*authenticationv1.TokenRequest
	remote := remoteWithExtension(&reqs)
	err = Linker{Remote: remote, Config: &rest.Config{}, Installed: func(context.Context) (install.Config, error) {
		return install.Config{}, apierrors.NewNotFound(corev1.Resource("namespaces"), "plexus-system")
	}}.Link(context.Background(), LinkOptions{ClusterName: "b", TokenLifetime: time.Hour}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "reading the Plexus install") {
		t.Errorf("no Plexus: %v", err)
	}
	if s, _ := remote.CoreV1().Secrets(mc.Namespace).List(context.Background(), metav1.ListOptions{}); len(s.Items) != 0 || len(reqs) != 0 {
		t.Errorf("a refused link created %v and %d tokens", s.Items, len(reqs))
	}
	err = Linker{Remote: remote, Config: &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, Installed: ok}.
		Link(context.Background(), LinkOptions{ClusterName: "b", TokenLifetime: time.Hour}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "skips TLS verification") {
		t.Errorf("insecure kubeconfig: %v", err)
	}
	for _, o := range []LinkOptions{{TokenLifetime: time.Hour}, {ClusterName: "B_1", TokenLifetime: time.Hour},
		{ClusterName: strings.Repeat("b", 31), TokenLifetime: time.Hour}, {ClusterName: "b", TokenLifetime: time.Minute}} {
		if o.Validate() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestUnlink: unlink deletes the Link, the credentials, and the binding
// Secret in the linked cluster (revoking the token); run again after the
// Link went, it still finds the binding through the credentials.
func TestUnlink(t *testing.T) {
	ctx := context.Background()
	for _, linkGone := range []bool{false, true} {
		link := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"clusterName": "b"}}}
		link.SetAPIVersion(mc.APIVersion)
		link.SetKind(mc.LinkKind)
		link.SetNamespace(mc.Namespace)
		link.SetName("b")
		link.SetAnnotations(map[string]string{TokenBindingAnnotation: "plexus-mc-link-b-1"})
		var objs []runtime.Object
		if !linkGone {
			objs = append(objs, link)
		}
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{mc.LinkResource: "LinkList"}, objs...)
		local := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "cluster-credentials-b",
			Annotations: map[string]string{TokenBindingAnnotation: "plexus-mc-link-b-1"}}})
		remote := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "plexus-mc-link-b-1"}})
		var out bytes.Buffer
		if err := (Unlinker{Local: local, Dynamic: dyn, Remote: remote, Wait: time.Second}).Unlink(ctx, "b", &out); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Link left: %v", err)
		}
		for what, c := range map[string]kubernetes.Interface{"cluster-credentials-b": local, "plexus-mc-link-b-1": remote} {
			if _, err := c.CoreV1().Secrets(mc.Namespace).Get(ctx, what, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("link gone %v: Secret %s left: %v", linkGone, what, err)
			}
		}
		if !strings.Contains(out.String(), "the token is revoked") {
			t.Errorf("output %q", out.String())
		}
	}
}

// TestCheck: a Ready Link whose clusters share an anchor passes; a mirror
// that collides, a Link not Ready and disjoint anchors fail, naming what.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	anchorA, anchorB := newAnchor(t, "anchor a"), newAnchor(t, "anchor b")
	anchorsCM := func(pem []byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: identitycmd.AnchorsConfigMap},
			Data: map[string]string{identitycmd.AnchorsBundleKey: string(pem)}}
	}
	fedSvc := func(name string, labels, annotations map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: labels, Annotations: annotations}}
	}
	local := fake.NewSimpleClientset(anchorsCM(pki.EncodeCerts(anchorA.Cert)),
		fedSvc("web", map[string]string{mc.ExportedLabel: mc.ExportedFederated}, nil),
		fedSvc("web-federated", map[string]string{mc.FederatedLabel: "web"}, map[string]string{mc.FederatedClustersAnnotation: "b,c"}),
		fedSvc("api-federated", map[string]string{mc.FederatedLabel: "api"}, map[string]string{mc.FederatedClustersAnnotation: "b"}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "creds-b"}, Data: map[string][]byte{mc.CredentialsKey: []byte("b")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "creds-c"}, Data: map[string][]byte{mc.CredentialsKey: []byte("c")}})
	remotes := map[string]kubernetes.Interface{
		"b": fake.NewSimpleClientset(anchorsCM(pki.EncodeCerts(anchorB.Cert, anchorA.Cert))), // a bundle overlapping ours
		"c": fake.NewSimpleClientset(anchorsCM(pki.EncodeCerts(anchorB.Cert))),
	}
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": "2026-11-28T00:00:00Z"}
	}
	link := func(name string, ready map[string]any, mirrors ...any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"spec":   map[string]any{"clusterName": name, "credentialsSecret": "creds-" + name},
			"status": map[string]any{"conditions": []any{ready}, "mirrorServices": mirrors},
		}}
		u.SetAPIVersion(mc.APIVersion)
		u.SetKind(mc.LinkKind)
		u.SetNamespace(mc.Namespace)
		u.SetName(name)
		return u
	}
	collision := map[string]any{"remoteRef": map[string]any{"namespace": "shop", "name": "web"}, "localRef": map[string]any{"namespace": "shop", "name": "web-b"},
		"conditions": []any{cond(mc.ConditionMirrored, "False", "NameCollision", "Service shop/web-b exists and is not this Link's mirror")}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{mc.LinkResource: "LinkList"},
		link("b", cond(mc.ConditionReady, "True", "Ready", ""), collision),
		link("c", cond(mc.ConditionReady, "False", "Unreachable", "the remote API server fails: dial tcp 10.214.0.251:6443: connect: no route to host")))
	c := Checker{Local: local, Dynamic: dyn, NewRemote: func(kubeconfig []byte) (kubernetes.Interface, error) { return remotes[string(kubeconfig)], nil }}
	var out bytes.Buffer
	passed := healthcheck.Print(&out, c.Run(ctx), false)
	t.Log(out.String())
	if passed {
		t.Error("check passed")
	}
	for _, want := range []string{
		"✔ the Link resource is served",
		"✘ the service mirror is available",
		"✔ Link b (cluster b) is ready",
		"✘ Link b: shop/web is mirrored as web-b: NameCollision: Service shop/web-b exists",
		"✔ Link b: both clusters trust a common anchor",
		"✘ Link c (cluster c) is ready: Unreachable: the remote API server fails: dial tcp 10.214.0.251:6443",
		`✘ Link c: both clusters trust a common anchor: no anchor in common: this cluster trusts "root.plexus.anchor a"`,
		`cluster c trusts "root.plexus.anchor b"`,
		"✔ federated Service shop/web-federated spans this cluster, b, c",
		"✔ federated Service shop/api-federated spans b\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q", want)
		}
	}
}

func newAnchor(t *testing.T, td string) pki.CA {
	t.Helper()
	ca, err := pki.NewAnchor(pki.CAOptions{TrustDomain: td})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestGateways: each link's gateway address, its gateway-mode mirrors and
// what the destination replicas' health checks say (alive only when all
// say so; the slowest check); a link without a gateway shows none; a
// replica not read is named.
func TestGateways(t *testing.T) {
	secret := func(cluster, gw string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "cluster-credentials-" + cluster,
			Labels: map[string]string{mc.ClusterNameLabel: cluster}, Annotations: map[string]string{}}, Type: mc.CredentialsSecretType}
		if gw != "" {
			s.Annotations[mc.GatewayAddressAnnotation] = gw
		}
		return s
	}
	mirror := func(name, cluster string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{mc.GatewayLabel: cluster}}}
	}
	dest := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: name, Labels: map[string]string{"app.kubernetes.io/name": "plexus-destination"}}}
	}
	kube := fake.NewClientset(secret("b", "10.214.0.1:32210"), secret("c", "10.215.0.1:31000"), secret("d", ""),
		mirror("web-b", "b"), mirror("api-b", "b"), mirror("web-c", "c"), dest("destination-1"), dest("destination-2"), dest("destination-3"))
	metrics := map[string]string{
		"destination-1": "plexus_destination_gateway_healthy{cluster=\"b\"} 1\nplexus_destination_gateway_healthy{cluster=\"c\"} 1\n" +
			"plexus_destination_gateway_probe_seconds{cluster=\"b\"} 0.0012\nplexus_destination_gateway_probe_seconds{cluster=\"c\"} 0.002\n",
		"destination-2": "plexus_destination_gateway_healthy{cluster=\"b\"} 1\nplexus_destination_gateway_healthy{cluster=\"c\"} 0\n" +
			"plexus_destination_gateway_probe_seconds{cluster=\"b\"} 0.0031\n",
	}
	scrape := func(_ context.Context, pod string) ([]byte, error) {
		m, ok := metrics[pod]
		if !ok {
			return nil, errors.New("connection refused")
		}
		return []byte(m), nil
	}
	gs, err := Gateways(context.Background(), kube, scrape)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := PrintGateways(&out, gs, ""); err != nil {
		t.Fatal(err)
	}
	want := `CLUSTER   GATEWAY            ALIVE     SERVICES   LATENCY
b         10.214.0.1:32210   yes       2          3.1ms
c         10.215.0.1:31000   no        1          2ms
d         (none)             unknown   0          -
b: destination replica not read: destination-3: connection refused
c: destination replica not read: destination-3: connection refused
d: destination replica not read: destination-3: connection refused
`
	if out.String() != want {
		t.Errorf("gateways:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestAllow: allow prints a service account of one link's own with the
// grants install gives the shared one (the same ClusterRole and anchors
// Role, and a token Role naming only itself); it refuses the shared
// account's name and names that are not names.
func TestAllow(t *testing.T) {
	var out bytes.Buffer
	if err := Allow("a-reader", &out); err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out.Bytes())
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	want := []string{
		"ServiceAccount plexus-multicluster/a-reader",
		"ClusterRoleBinding /plexus-multicluster-remote-access-a-reader",
		"Role plexus-multicluster/plexus-multicluster-remote-access-a-reader",
		"RoleBinding plexus-multicluster/plexus-multicluster-remote-access-a-reader",
		"RoleBinding plexus-system/plexus-multicluster-remote-access-a-reader",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	role, _, _ := unstructured.NestedSlice(objs[2].Object, "rules")
	if rule := role[0].(map[string]any); rule["resourceNames"].([]any)[0] != "a-reader" || rule["verbs"].([]any)[0] != "create" {
		t.Errorf("token Role rule %v, want create of a-reader's tokens only", rule)
	}
	for i, ref := range map[int]string{1: "ClusterRole/plexus-multicluster-remote-access", 3: "Role/plexus-multicluster-remote-access-a-reader", 4: "Role/plexus-multicluster-remote-access"} {
		r, _, _ := unstructured.NestedStringMap(objs[i].Object, "roleRef")
		if r["kind"]+"/"+r["name"] != ref {
			t.Errorf("%s %s binds %v, want %s", objs[i].GetKind(), objs[i].GetName(), r, ref)
		}
	}
	for _, bad := range []string{RemoteAccessAccount, "A_b", "", strings.Repeat("a", 230)} {
		if err := Allow(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("allow %q accepted", bad)
		}
	}
}

// TestLinkAllowedAccount: link --service-account-name mints the token for
// that account, and without it in the linked cluster says how to allow it.
func TestLinkAllowedAccount(t *testing.T) {
	var reqs []*authenticationv1.TokenRequest
	remote := remoteWithExtension(&reqs)
	var accounts []string
	remote.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "token" {
			accounts = append(accounts, a.(k8stesting.CreateActionImpl).Name)
		}
		return false, nil, nil
	})
	l := Linker{Remote: remote, Config: &rest.Config{Host: "https://127.0.0.1:6443"},
		Installed: func(context.Context) (install.Config, error) { return install.Config{TrustDomain: "b.example"}, nil }}
	o := LinkOptions{ClusterName: "b", TokenLifetime: time.Hour, ServiceAccount: "a-reader"}
	if err := l.Link(context.Background(), o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "plexusctl multicluster allow --service-account-name a-reader") {
		t.Fatalf("link for an account not allowed: %v", err)
	}
	if _, err := remote.CoreV1().ServiceAccounts(mc.Namespace).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "a-reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := l.Link(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if len(accounts) != 1 || accounts[0] != "a-reader" {
		t.Errorf("tokens minted for %v, want a-reader", accounts)
	}
	var secret corev1.Secret
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(decodeAll(t, out.Bytes())[0].Object, &secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(secret.Data[mc.CredentialsKey])
	if err != nil {
		t.Fatal(err)
	}
	if ctx := cfg.Contexts[cfg.CurrentContext]; ctx.AuthInfo != "a-reader" || cfg.AuthInfos["a-reader"].Token != "tok" {
		t.Errorf("kubeconfig context %+v", ctx)
	}
	if (LinkOptions{ClusterName: "b", TokenLifetime: time.Hour, ServiceAccount: "A_b"}).Validate() == nil {
		t.Error("--service-account-name A_b accepted")
	}
}
