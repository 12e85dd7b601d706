package tapservice

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	sidecartap "github.com/plexus-mesh/plexus/sidecar/tap"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

func TestParsePath(t *testing.T) {
	for p, want := range map[string]target{
		tapapi.Path("demo", "deployments", "web"): {"demo", "deployments", "web"},
		tapapi.Path("demo", "namespaces", ""):     {"demo", "namespaces", "demo"},
		tapapi.Path("demo", "pods", "web-1"):      {"demo", "pods", "web-1"},
	} {
		got, ok := parsePath(p)
		if !ok || got != want {
			t.Errorf("parsePath(%s) = %v, %v; want %v", p, got, ok, want)
		}
	}
	for _, p := range []string{
		"/apis/tap.plexus.dev/v1alpha1/watch/namespaces/demo/secrets/x/tap",
		"/apis/tap.plexus.dev/v1alpha1/watch/namespaces/demo/deployments/web",
		"/apis/tap.plexus.dev/v1alpha1/namespaces/demo/deployments/web/tap",
		"/apis/tap.plexus.dev/v1alpha1/watch/namespaces//tap",
		"/apis/tap.plexus.dev/v1alpha1/watch/namespaces/demo/namespaces/demo/tap",
	} {
		if got, ok := parsePath(p); ok {
			t.Errorf("parsePath(%s) = %v, want refused", p, got)
		}
	}
}

func TestFrontProxyFromConfigMap(t *testing.T) {
	if _, err := FrontProxyFromConfigMap(map[string]string{}); err == nil || !strings.Contains(err.Error(), "requestheader-client-ca-file") {
		t.Errorf("no CA: %v", err)
	}
	if _, err := FrontProxyFromConfigMap(map[string]string{"requestheader-client-ca-file": "junk"}); err == nil {
		t.Error("junk CA accepted")
	}
}

// fixture is a tap service in front of one meshed pod whose proxy's tap
// server is real (sidecar/tap) on loopback.
type fixture struct {
	url     string
	front   *testCA
	hub     *sidecartap.Hub
	reviews []authorizationv1.SubjectAccessReview
	// allow answers the reviews (nil: alice may do anything, no one else
	// anything).
	allow func(authorizationv1.SubjectAccessReviewSpec) (bool, error)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	mesh := newTestCA(t, "mesh")
	front := newTestCA(t, "front-proxy-ca")
	td := "cluster.local"
	podID := spiffe.New(td, "demo", "web")
	tapID := spiffe.New(td, "plexus-viz", "plexus-tap")

	hub := sidecartap.NewHub(nil)
	proxy := sidecartap.NewServer(sidecartap.ServerOptions{Hub: hub, Certs: mesh.source(t, podID), Allowed: tapID})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go sidecartap.Serve(proxy, ln)
	t.Cleanup(proxy.Stop)
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	labels := map[string]string{"app": "web"}
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: "web", InitContainers: []corev1.Container{{Name: "plexus-proxy", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "plexus-tap", ContainerPort: port}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	// load-1, of deployment load, is a source to filter on.
	load := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "load-1", Namespace: "demo", Labels: map[string]string{"app": "load"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.1.7"}}
	loadDep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: "demo"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "load"}}}}
	// In namespace secrets, deployment secret-thing and its pod.
	secret := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "secret-thing-1", Namespace: "secrets", Labels: map[string]string{"app": "secret-thing"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.9"}}
	secretDep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "secret-thing", Namespace: "secrets"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "secret-thing"}}}}
	kube := fake.NewSimpleClientset(pod, dep, load, loadDep, secret, secretDep)
	f := &fixture{front: front, hub: hub}
	var mu sync.Mutex
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		mu.Lock()
		defer mu.Unlock()
		f.reviews = append(f.reviews, *sar)
		if f.allow == nil {
			sar.Status.Allowed = sar.Spec.User == "alice"
			return true, sar, nil
		}
		ok, err := f.allow(sar.Spec)
		sar.Status.Allowed = ok
		return true, sar, err
	})
	h := New(Options{Kube: kube, Auth: &FrontProxy{CAs: front.pool(), AllowedNames: []string{"front-proxy-client"},
		UserHeaders: []string{"X-Remote-User"}, GroupHeaders: []string{"X-Remote-Group"}, ExtraPrefixes: []string{"X-Remote-Extra-"}},
		Certs: mesh.source(t, tapID), TrustDomain: td, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// post calls the service as the API server would (cert nil: as a stranger).
func (f *fixture) post(t *testing.T, ctx context.Context, cert *tls.Certificate, user, path string, body tapapi.Request) *http.Response {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+path, bytes.NewReader(b))
	req.Header.Set("X-Remote-User", user)
	req.Header.Add("X-Remote-Group", "devs")
	req.Header.Set("X-Remote-Extra-Scopes%2Fx", "s")
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestTapThroughTheService(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	apiServer := f.front.leaf(t, "front-proxy-client", spiffe.ID{})
	path := tapapi.Path("demo", "deployments", "web")

	if res := f.post(t, ctx, nil, "alice", path, tapapi.Request{}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("no client certificate: %d, want 401", res.StatusCode)
	}
	other := f.front.leaf(t, "someone-else", spiffe.ID{})
	if res := f.post(t, ctx, &other, "alice", path, tapapi.Request{}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a name not allowed: %d, want 401", res.StatusCode)
	}
	res := f.post(t, ctx, &apiServer, "bob", path, tapapi.Request{})
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "bob cannot watch deployments/tap") {
		t.Errorf("bob: %d %s, want 403 naming the right", res.StatusCode, body)
	}
	last := f.reviews[len(f.reviews)-1].Spec
	if ra := last.ResourceAttributes; ra.Verb != "watch" || ra.Resource != "deployments" || ra.Subresource != "tap" || ra.Name != "web" ||
		ra.Namespace != "demo" || ra.Group != tapapi.Group || last.Groups[0] != "devs" || last.Extra["scopes/x"][0] != "s" {
		t.Errorf("review = %+v", last)
	}
	for name, bad := range map[string]tapapi.Request{
		"direction":     {Direction: "sideways"},
		"rate":          {MaxEventRate: tapapi.MaxEventRate + 1},
		"tiny rate":     {MaxEventRate: 1e-320}, // would round to 0, the proxies' default
		"limit":         {Limit: math.MaxUint32 + 1},
		"path prefix":   {PathPrefix: "/" + strings.Repeat("x", tapapi.MaxFilterString)},
		"redact header": {RedactHeaders: []string{"x api key"}},
		"show header":   {ShowHeaders: []string{"x:key"}},
		"show always":   {ShowHeaders: []string{"x-api-key", "Authorization"}},
		"show cookie":   {ShowHeaders: []string{"cookie"}},
		"query param":   {RedactQueryParams: []string{"a=b"}},
		"show param":    {ShowQueryParams: []string{strings.Repeat("p", sidecartap.MaxName+1)}},
		"many params":   {RedactQueryParams: slices.Repeat([]string{"p"}, MaxRedactionNames+1)},
		"from":          {FromNamespace: "demo", FromResource: "secrets", FromName: "x"},
	} {
		if res := f.post(t, ctx, &apiServer, "alice", path, bad); res.StatusCode != http.StatusBadRequest {
			t.Errorf("bad %s: %d, want 400", name, res.StatusCode)
		}
	}

	// From deploy/load only, with x-api-key redacted, x-csrf-token shown
	// and the query's tenant redacted besides the defaults.
	res = f.post(t, ctx, &apiServer, "alice", path, tapapi.Request{PathPrefix: "/books", Limit: 1, MaxEventRate: 3000,
		FromNamespace: "demo", FromResource: "deployments", FromName: "load", RedactHeaders: []string{"X-Api-Key"},
		ShowHeaders: []string{"x-csrf-token"}, RedactQueryParams: []string{"tenant"}})
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("alice: %d %s", res.StatusCode, b)
	}
	go func() {
		// The session is open (or the test is over: ctx ends within 20s).
		eventually.Holds(20*time.Second, func() bool { return ctx.Err() != nil || f.hub.Active() })
		for _, r := range []struct{ path, source string }{{"/votes", "10.1.1.7:40000"}, {"/books/0", "10.1.1.1:40000"}, {"/books/1?code=c&tenant=t&page=2", "10.1.1.7:40000"}} {
			tp := f.hub.Start(&sidecartap.Info{Direction: "inbound", Method: "GET", Path: r.path, Authority: "web",
				Source: netip.MustParseAddrPort(r.source), Destination: netip.MustParseAddrPort("127.0.0.1:8080"),
				Headers: func(fn func(name, value string)) {
					fn("X-Api-Key", "secret")
					fn("X-Auth-Token", "secret")
					fn("X-Csrf-Token", "c")
					fn("Accept", "*/*")
				}})
			tp.Response(200)
			tp.End(200, "", "", 42)
		}
	}()
	var evs []tapapi.Event
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var e tapapi.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events (%+v), want 3 for one request, then the end of the tap at its limit", len(evs), evs)
	}
	start, end := evs[0], evs[2]
	if start.Type != tapapi.RequestStart || start.Path != "/books/1?code=REDACTED&tenant=REDACTED&page=2" || start.Pod != "web-1" || start.Namespace != "demo" || start.ID != "web-1:1" {
		t.Errorf("start = %+v", start)
	}
	want := []tapapi.Header{{Name: "x-api-key", Value: tapapi.Redacted}, {Name: "x-auth-token", Value: tapapi.Redacted},
		{Name: "x-csrf-token", Value: "c"}, {Name: "accept", Value: "*/*"}}
	if !slices.Equal(start.Headers, want) {
		t.Errorf("headers = %v, want %v", start.Headers, want)
	}
	if evs[1].Type != tapapi.ResponseStart || evs[1].Status != 200 {
		t.Errorf("response = %+v", evs[1])
	}
	if end.Type != tapapi.ResponseEnd || end.ResponseBytes != 42 || end.DurationMs <= 0 {
		t.Errorf("end = %+v", end)
	}
}

// TestFitsProxies: a filter the proxies would refuse as too large is
// refused before any is asked.
func TestFitsProxies(t *testing.T) {
	addrs := func(n int, format string) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(format, i))
		}
		return out
	}
	v6 := addrs(MaxPeerAddrs, "[fd00:1234:5678:9abc:def0:1234:5678:%04x]:65535")
	if err := fitsProxies(tapapi.Request{}, v6, nil); err != nil {
		t.Errorf("%d IPv6 destinations: %v", len(v6), err)
	}
	long := tapapi.Request{PathPrefix: strings.Repeat("p", tapapi.MaxFilterString), Authority: strings.Repeat("a", tapapi.MaxFilterString), Route: strings.Repeat("r", tapapi.MaxFilterString)}
	err := fitsProxies(long, v6, addrs(MaxPeerAddrs, "fd00:1234:5678:9abc:def0:1234:5678:%04x"))
	if err == nil || !strings.Contains(err.Error(), "more than the 65536 they take") {
		t.Errorf("both ends' IPv6 addresses and long strings: %v, want refused", err)
	}
}

// TestObserveRequest: a tap's events per second become each proxy's share
// in requests, and its filter reaches the proxies whole.
func TestObserveRequest(t *testing.T) {
	req := tapapi.Request{Direction: "inbound", Method: "GET", Authority: "web", PathPrefix: "/b", Route: "books",
		RedactHeaders: []string{"x-api-key"}, RedactQueryParams: []string{"tenant"}, ShowHeaders: []string{"x-csrf-token"}, ShowQueryParams: []string{"code"},
		MaxEventRate: 120, Limit: 7}
	obs := observeRequest(req, []string{"10.0.0.1"}, []string{"10.0.0.2"}, 4)
	if obs.MaxRps != 10 || obs.Limit != 7 || !slices.Equal(obs.RedactHeaders, req.RedactHeaders) {
		t.Errorf("rate, limit, redaction = %v, %d, %v; want 10 requests/s per pod (120 events/s, 3 a request, 4 pods), 7, [x-api-key]", obs.MaxRps, obs.Limit, obs.RedactHeaders)
	}
	if !slices.Equal(obs.RedactQueryParams, req.RedactQueryParams) || !slices.Equal(obs.ShowHeaders, req.ShowHeaders) || !slices.Equal(obs.ShowQueryParams, req.ShowQueryParams) {
		t.Errorf("redact query params, show headers, show query params = %v, %v, %v; want the request's", obs.RedactQueryParams, obs.ShowHeaders, obs.ShowQueryParams)
	}
	f := obs.Filter
	if f.Direction != "inbound" || f.Method != "GET" || f.Authority != "web" || f.PathPrefix != "/b" || f.Route != "books" ||
		!slices.Equal(f.DestinationAddrs, []string{"10.0.0.1"}) || !slices.Equal(f.SourceAddrs, []string{"10.0.0.2"}) {
		t.Errorf("filter = %v", f)
	}
}

func TestDiscovery(t *testing.T) {
	f := newFixture(t)
	apiServer := f.front.leaf(t, "front-proxy-client", spiffe.ID{})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{apiServer}}}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/apis/tap.plexus.dev/v1alpha1", nil)
	req.Header.Set("X-Remote-User", "system:kube-aggregator")
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var l metav1.APIResourceList
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range l.APIResources {
		found = found || r.Name == "deployments/tap" && len(r.Verbs) == 1 && r.Verbs[0] == "watch"
	}
	if l.GroupVersion != "tap.plexus.dev/v1alpha1" || !found {
		t.Errorf("discovery = %+v", l)
	}
}

// TestPeerAddrs: a tap's ends resolve to the selected pods' IPs (by
// namespace, resource and labels), a destination Service's cluster IPs,
// and listed addresses; bad values are errors naming the field.
func TestPeerAddrs(t *testing.T) {
	pod := func(name, ip string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: labels},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "books", Namespace: "demo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "books"}, ClusterIPs: []string{"10.96.0.10", "fd00::10"}}}
	dualStack := func(p *corev1.Pod, ip6 string) *corev1.Pod {
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}, {IP: ip6}}
		return p
	}
	kube := fake.NewSimpleClientset(svc,
		dualStack(pod("books-1", "10.1.0.1", map[string]string{"app": "books", "track": "stable"}), "fd00:1::1"),
		pod("books-2", "10.1.0.2", map[string]string{"app": "books", "track": "canary"}),
		pod("votes-1", "10.1.0.3", map[string]string{"app": "votes"}))
	ctx := context.Background()
	for name, c := range map[string]struct {
		req        tapapi.Request
		dsts, srcs []string
	}{
		"nothing":            {tapapi.Request{}, nil, nil},
		"a namespace":        {tapapi.Request{ToNamespace: "demo"}, []string{"10.1.0.1", "fd00:1::1", "10.1.0.2", "10.1.0.3"}, nil},
		"a service":          {tapapi.Request{ToNamespace: "demo", ToResource: "services", ToName: "books"}, []string{"10.1.0.1", "fd00:1::1", "10.1.0.2", "10.96.0.10", "fd00::10"}, nil},
		"a service as from":  {tapapi.Request{FromNamespace: "demo", FromResource: "services", FromName: "books"}, nil, []string{"10.1.0.1", "fd00:1::1", "10.1.0.2"}},
		"labels":             {tapapi.Request{FromNamespace: "demo", FromSelector: "app=books,track!=canary"}, nil, []string{"10.1.0.1", "fd00:1::1"}},
		"labels, none":       {tapapi.Request{ToNamespace: "demo", ToSelector: "app=nothing"}, []string{"0.0.0.0"}, nil},
		"addresses":          {tapapi.Request{ToAddrs: []string{"10.2.0.1", "[fd00::1]:8080"}, FromAddrs: []string{"::ffff:10.2.0.9"}}, []string{"10.2.0.1", "[fd00::1]:8080"}, []string{"::ffff:10.2.0.9"}},
		"addresses and pods": {tapapi.Request{ToAddrs: []string{"10.2.0.1"}, ToNamespace: "demo", ToSelector: "app=votes"}, []string{"10.2.0.1", "10.1.0.3"}, nil},
	} {
		dsts, srcs, err := peerAddrs(ctx, kube, noRights(t), "demo", c.req)
		slices.Sort(dsts)
		slices.Sort(c.dsts)
		slices.Sort(srcs)
		slices.Sort(c.srcs)
		if err != nil || !slices.Equal(dsts, c.dsts) || !slices.Equal(srcs, c.srcs) {
			t.Errorf("%s: %v, %v, %v; want %v, %v", name, dsts, srcs, err, c.dsts, c.srcs)
		}
	}
	for name, c := range map[string]struct {
		req  tapapi.Request
		want string
	}{
		"bad address":        {tapapi.Request{ToAddrs: []string{"10.0.0.0/8"}}, `toAddrs: "10.0.0.0/8" is not an IP or IP:port`},
		"source port":        {tapapi.Request{FromAddrs: []string{"10.0.0.1:80"}}, `fromAddrs: "10.0.0.1:80" is not an IP (a source's port is not known)`},
		"zone":               {tapapi.Request{ToAddrs: []string{"[fe80::1%eth0]:80"}}, `toAddrs: "[fe80::1%eth0]:80" is not an IP`},
		"bad selector":       {tapapi.Request{ToNamespace: "demo", ToSelector: "app in (books"}, `toSelector "app in (books"`},
		"selector, no ns":    {tapapi.Request{FromSelector: "app=books"}, "need fromNamespace"},
		"unknown resource":   {tapapi.Request{ToNamespace: "demo", ToResource: "secrets", ToName: "x"}, `toResource "secrets"`},
		"too many addresses": {tapapi.Request{ToAddrs: slices.Repeat([]string{"10.0.0.1"}, MaxPeerAddrs+1)}, "toAddrs: 701 addresses"},
	} {
		_, _, err := peerAddrs(ctx, kube, noRights(t), "demo", c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
}

// noRights is the caller's rights where none should be asked for: ends in
// the target's own namespace.
func noRights(t *testing.T) rightsFunc {
	return func(_ context.Context, as []access) (bool, error) {
		t.Errorf("rights %v asked for in the target's namespace", as)
		return false, nil
	}
}

// TestReadsOf: what a filter's end needs the caller to read, per kind.
func TestReadsOf(t *testing.T) {
	listPods := access{"b", "list", "", "pods", ""}
	for tg, want := range map[target][]access{
		{"b", "namespaces", "b"}:   {listPods},
		{"b", "pods", "p"}:         {{"b", "get", "", "pods", "p"}},
		{"b", "services", "s"}:     {{"b", "get", "", "services", "s"}, listPods},
		{"b", "deployments", "d"}:  {{"b", "get", "apps", "deployments", "d"}, listPods},
		{"b", "statefulsets", "d"}: {{"b", "get", "apps", "statefulsets", "d"}, listPods},
		{"b", "daemonsets", "d"}:   {{"b", "get", "apps", "daemonsets", "d"}, listPods},
		{"b", "replicasets", "d"}:  {{"b", "get", "apps", "replicasets", "d"}, listPods},
		{"b", "jobs", "j"}:         {{"b", "get", "batch", "jobs", "j"}, listPods},
		{"b", "cronjobs", "c"}:     {{"b", "get", "batch", "cronjobs", "c"}, {"b", "list", "batch", "jobs", ""}, listPods},
	} {
		if got := readsOf(tg); !slices.Equal(got, want) {
			t.Errorf("readsOf(%v) = %v, want %v", tg, got, want)
		}
	}
	for _, r := range tapapi.Resources {
		if r != "namespaces" && readsOf(target{"b", r, "x"})[0].resource != r {
			t.Errorf("%s: its filter does not check the caller may get it", r)
		}
	}
}

// TestPeerAddrsRights: an end in another namespace than the target's is
// resolved only if the caller may read what it names there; when it may
// not, the answer is the one for a missing object, whether it exists or
// not.
func TestPeerAddrsRights(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "secret-thing-1", Namespace: "b", Labels: map[string]string{"app": "secret"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.0.1"}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "secret-thing", Namespace: "b"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "secret"}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "secret-svc", Namespace: "b"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "secret"}, ClusterIPs: []string{"10.96.9.1"}}}
	kube := fake.NewSimpleClientset(pod, dep, svc)
	ctx := context.Background()
	var asked []access
	rights := func(allowed bool, err error) rightsFunc {
		return func(_ context.Context, as []access) (bool, error) {
			asked = append(asked, as...)
			return allowed, err
		}
	}
	from := func(resource, name string) tapapi.Request {
		return tapapi.Request{FromNamespace: "b", FromResource: resource, FromName: name}
	}
	answer := func(may rightsFunc, req tapapi.Request) string {
		_, _, err := peerAddrs(ctx, kube, may, "a", req)
		var nf *notFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("%+v: %v, want not found", req, err)
		}
		return nf.msg
	}

	denied := answer(rights(false, nil), from("deployments", "secret-thing"))
	if !slices.Equal(asked, readsOf(target{"b", "deployments", "secret-thing"})[:len(asked)]) || len(asked) == 0 {
		t.Errorf("asked %v", asked)
	}
	want := `from: deployments "secret-thing" in namespace "b" is not found, or you may not read it (a filter on it needs get on deployments and list on pods there)`
	if denied != want {
		t.Errorf("denied: %q, want %q", denied, want)
	}
	// A missing object: the same answer, allowed or not.
	missing := strings.ReplaceAll(want, "secret-thing", "no-thing")
	for _, allowed := range []bool{false, true} {
		if got := answer(rights(allowed, nil), from("deployments", "no-thing")); got != missing {
			t.Errorf("missing, allowed %v: %q, want %q", allowed, got, missing)
		}
	}
	for _, c := range []struct{ resource, name string }{{"services", "secret-svc"}, {"pods", "secret-thing-1"}} {
		d := answer(rights(false, nil), from(c.resource, c.name))
		if m := answer(rights(true, nil), from(c.resource, "no-thing")); strings.ReplaceAll(d, c.name, "no-thing") != m {
			t.Errorf("%s: denied %q, missing %q: want one answer", c.resource, d, m)
		}
	}
	// A namespace or a selector in it, and a destination Service's IPs.
	if got := answer(rights(false, nil), tapapi.Request{ToNamespace: "b", ToSelector: "app=secret"}); got !=
		`to: namespace "b" is not found, or you may not read it (a filter on it needs list on pods there)` {
		t.Errorf("selector denied: %q", got)
	}
	asked = nil
	dsts, srcs, err := peerAddrs(ctx, kube, rights(true, nil), "a", tapapi.Request{FromNamespace: "b", FromResource: "deployments", FromName: "secret-thing",
		ToNamespace: "b", ToResource: "services", ToName: "secret-svc"})
	if err != nil || !slices.Equal(srcs, []string{"10.9.0.1"}) || !slices.Equal(dsts, []string{"10.9.0.1", "10.96.9.1"}) {
		t.Errorf("allowed: %v, %v, %v", dsts, srcs, err)
	}
	if want := append(readsOf(target{"b", "services", "secret-svc"}), readsOf(target{"b", "deployments", "secret-thing"})...); !slices.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
	// The API server not answering is not an answer about the object.
	_, _, err = peerAddrs(ctx, kube, rights(false, &reviewError{errors.New("timeout")}), "a", from("deployments", "secret-thing"))
	var re *reviewError
	if !errors.As(err, &re) {
		t.Errorf("review failed: %v, want a reviewError", err)
	}
}

// TestFilterRightsThroughTheService: a user who may tap namespace demo,
// and read nothing in namespace secrets, gets the same 404 for a filter
// on an object of secrets whether it exists or not; one who may read
// there taps with it. The reviews are the caller's own.
func TestFilterRightsThroughTheService(t *testing.T) {
	f := newFixture(t)
	f.allow = func(s authorizationv1.SubjectAccessReviewSpec) (bool, error) {
		ra := s.ResourceAttributes
		switch {
		case s.User == "alice":
			return true, nil
		case s.User == "dave" && ra.Namespace == "secrets":
			return false, errors.New("the API server is away")
		}
		return ra.Namespace == "demo", nil // carol, dave
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	apiServer := f.front.leaf(t, "front-proxy-client", spiffe.ID{})
	path := tapapi.Path("demo", "deployments", "web")
	tap := func(user string, req tapapi.Request) (int, string) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		res := f.post(t, ctx, &apiServer, user, path, req)
		if res.StatusCode == http.StatusOK {
			return res.StatusCode, ""
		}
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	from := func(name string) tapapi.Request {
		return tapapi.Request{FromNamespace: "secrets", FromResource: "deployments", FromName: name}
	}

	f.reviews = nil
	code, exists := tap("carol", from("secret-thing"))
	if code != http.StatusNotFound || !strings.Contains(exists, `"reason":"NotFound"`) {
		t.Errorf("carol, an object of secrets: %d %s, want 404", code, exists)
	}
	var asked []authorizationv1.SubjectAccessReviewSpec
	for _, r := range f.reviews {
		asked = append(asked, r.Spec)
	}
	if len(asked) != 2 || asked[0].ResourceAttributes.Verb != "watch" || asked[1].User != "carol" || asked[1].Groups[0] != "devs" ||
		*asked[1].ResourceAttributes != (authorizationv1.ResourceAttributes{Namespace: "secrets", Verb: "get", Group: "apps", Resource: "deployments", Name: "secret-thing"}) {
		t.Errorf("reviews %+v, want the tap's then get deployments/secret-thing in secrets, as carol", asked)
	}
	_, missing := tap("carol", from("no-such-thing"))
	if strings.ReplaceAll(exists, "secret-thing", "no-such-thing") != missing {
		t.Errorf("carol: an object that exists answered\n%s\none that does not\n%s\nwant one answer", exists, missing)
	}
	if code, body := tap("alice", from("no-such-thing")); code != http.StatusNotFound || body != missing {
		t.Errorf("alice, a missing object: %d %s, want carol's answer %s", code, body, missing)
	}
	if code, body := tap("alice", from("secret-thing")); code != http.StatusOK {
		t.Errorf("alice, who may read secrets: %d %s, want 200", code, body)
	}
	// The target's own namespace needs no more than the tap right.
	f.reviews = nil
	if code, body := tap("carol", tapapi.Request{FromNamespace: "demo", FromResource: "deployments", FromName: "load"}); code != http.StatusOK || len(f.reviews) != 1 {
		t.Errorf("carol, an object of demo: %d %s after %d reviews, want 200 after the tap's", code, body, len(f.reviews))
	}
	if code, body := tap("carol", tapapi.Request{ToNamespace: "secrets", ToSelector: "app=secret-thing"}); code != http.StatusNotFound {
		t.Errorf("carol, pods of secrets: %d %s, want 404", code, body)
	}
	if code, body := tap("dave", from("secret-thing")); code != http.StatusInternalServerError || strings.Contains(body, "not found") {
		t.Errorf("dave, whose review fails: %d %s, want 500", code, body)
	}
}
