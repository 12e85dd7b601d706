package healthcheck

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

// vizCluster is a healthy viz installation; tests break one part.
type vizCluster struct {
	namespace   bool
	deployments map[string]*appsv1.Deployment
	apiService  *unstructured.Unstructured
	pods        []*corev1.Pod
	// up is Prometheus's up{job="plexus-proxy"} by namespace/pod; status
	// other than 200 answers that status instead.
	up     map[string]string
	status int
	// asked records the queries Prometheus got.
	asked []string
}

func meshedPod(ns, name string, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: "plexus-proxy"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}},
	}
}

func healthyViz() *vizCluster {
	c := &vizCluster{namespace: true, deployments: map[string]*appsv1.Deployment{}, status: http.StatusOK}
	for _, name := range vizDeployments {
		c.deployments[name] = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: viznames.Namespace, Name: name},
			Status: appsv1.DeploymentStatus{AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
			}},
		}
	}
	c.apiService = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": viznames.APIService},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Available", "status": "True", "reason": "Passed"},
		}},
	}}
	old := now.Add(-10 * time.Minute)
	plain := meshedPod("shop", "plain-1", old)
	plain.Spec.Containers = plain.Spec.Containers[:1]
	done := meshedPod("shop", "job-1", old)
	done.Status.Phase = corev1.PodSucceeded
	c.pods = []*corev1.Pod{
		meshedPod("shop", "web-1", old), meshedPod("shop", "web-2", old), meshedPod("books", "books-1", old),
		meshedPod("shop", "new-1", now.Add(-10*time.Second)), // too young to be scraped yet
		plain, done,
	}
	c.up = map[string]string{"shop/web-1": "1", "shop/web-2": "1", "books/books-1": "1"}
	return c
}

// proxied answers a service-proxy request from an httptest server.
type proxied struct{ url string }

func (p proxied) DoRaw(ctx context.Context) ([]byte, error) {
	rc, err := p.Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (p proxied) Stream(ctx context.Context) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return nil, fmt.Errorf("the server is currently unable to handle the request (%d: %s)", res.StatusCode, b)
	}
	return res.Body, nil
}

func (c *vizCluster) checker(t *testing.T) Checker {
	t.Helper()
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.asked = append(c.asked, r.URL.Path+"?"+r.URL.RawQuery)
		if c.status != http.StatusOK {
			http.Error(w, "no endpoints available for service", c.status)
			return
		}
		var series []string
		for key, v := range c.up {
			ns, pod, _ := strings.Cut(key, "/")
			series = append(series, fmt.Sprintf(`{"metric":{"__name__":"up","job":"plexus-proxy","namespace":%q,"pod":%q},"value":[1700000000,%q]}`, ns, pod, v))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(series, ","))
	}))
	t.Cleanup(prom.Close)
	var objs []runtime.Object
	if c.namespace {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: viznames.Namespace}})
	}
	for _, d := range c.deployments {
		if d != nil {
			objs = append(objs, d)
		}
	}
	for _, p := range c.pods {
		objs = append(objs, p)
	}
	kube := fake.NewClientset(objs...)
	kube.PrependProxyReactor("services", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		pa := a.(k8stesting.ProxyGetAction)
		if pa.GetNamespace() != viznames.Namespace || pa.GetName() != "plexus-prometheus" || pa.GetPort() != "9090" || pa.GetScheme() != "http" {
			t.Errorf("proxied to %s %s/%s:%s", pa.GetScheme(), pa.GetNamespace(), pa.GetName(), pa.GetPort())
		}
		q := url.Values{}
		for k, v := range pa.GetParams() {
			q.Set(k, v)
		}
		return true, proxied{prom.URL + pa.GetPath() + "?" + q.Encode()}, nil
	})
	var dynObjs []runtime.Object
	if c.apiService != nil {
		dynObjs = append(dynObjs, c.apiService)
	}
	return Checker{
		Client: kube,
		Policy: inboundpolicy.Clients{Kube: kube, Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), dynObjs...)},
		Now:    func() time.Time { return now },
	}
}

func TestVizHealthy(t *testing.T) {
	c := healthyViz()
	rs := c.checker(t).vizChecks(context.Background())
	var titles []string
	for _, r := range rs {
		titles = append(titles, r.Name)
		if r.Status != OK {
			t.Errorf("%s: %s (hint: %s)", r.Name, r.Detail, r.Hint)
		}
	}
	want := []string{
		"viz Deployment plexus-tap is available", "viz Deployment plexus-web is available", "viz Deployment plexus-prometheus is available",
		"tap API (APIService v1alpha1.tap.plexus.dev) is available", "Prometheus scrapes every meshed pod's proxy",
	}
	if strings.Join(titles, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(titles, "\n"), strings.Join(want, "\n"))
	}
	if len(c.asked) != 1 || c.asked[0] != "/api/v1/query?query=up%7Bjob%3D%22plexus-proxy%22%7D" {
		t.Errorf("Prometheus asked %q", c.asked)
	}
}

func TestVizNotInstalled(t *testing.T) {
	c := healthyViz()
	c.namespace = false
	if rs := c.checker(t).vizChecks(context.Background()); len(rs) != 0 {
		t.Errorf("without %s: %+v, want no checks", viznames.Namespace, rs)
	}
}

func TestVizFailures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		breakIt     func(c *vizCluster)
		title       string
		detail      string
		hint        string
		otherFailed int
	}{
		{
			name:    "web unavailable",
			breakIt: func(c *vizCluster) { c.deployments[viznames.WebDeployment].Status = appsv1.DeploymentStatus{} },
			title:   "viz Deployment plexus-web is available", detail: "0 of 1 replicas available", hint: "kubectl -n plexus-viz describe deployment plexus-web",
		},
		{
			name:    "tap missing",
			breakIt: func(c *vizCluster) { c.deployments[viznames.TapDeployment] = nil },
			title:   "viz Deployment plexus-tap is available", detail: "Deployment plexus-viz/plexus-tap not found", hint: "plexusctl viz install",
		},
		{
			name: "APIService unavailable",
			breakIt: func(c *vizCluster) {
				c.apiService.Object["status"] = map[string]any{"conditions": []any{map[string]any{
					"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck", "message": "failing or missing response from https://10.0.0.5:8443",
				}}}
			},
			title:  "tap API (APIService v1alpha1.tap.plexus.dev) is available",
			detail: "Available is False: FailedDiscoveryCheck: failing or missing response", hint: "kubectl -n plexus-viz logs deploy/plexus-tap",
		},
		{
			name:    "APIService without status",
			breakIt: func(c *vizCluster) { delete(c.apiService.Object, "status") },
			title:   "tap API (APIService v1alpha1.tap.plexus.dev) is available", detail: "no Available condition yet",
		},
		{
			name:    "APIService missing",
			breakIt: func(c *vizCluster) { c.apiService = nil },
			title:   "tap API (APIService v1alpha1.tap.plexus.dev) is available", detail: "APIService v1alpha1.tap.plexus.dev not found", hint: "plexusctl viz install",
		},
		{
			name:    "scrapes refused",
			breakIt: func(c *vizCluster) { c.up["shop/web-2"] = "0" },
			title:   "Prometheus scrapes every meshed pod's proxy", detail: "scrapes failing: shop/web-2", hint: "plexusctl viz allow-scrapes -n NAMESPACE | kubectl apply -f - for shop",
		},
		{
			name:    "pod not a target",
			breakIt: func(c *vizCluster) { delete(c.up, "books/books-1") },
			title:   "Prometheus scrapes every meshed pod's proxy", detail: "not a target: books/books-1", hint: "/targets",
		},
		{
			name:    "Prometheus away",
			breakIt: func(c *vizCluster) { c.status = http.StatusServiceUnavailable },
			title:   "Prometheus scrapes every meshed pod's proxy", detail: "querying Prometheus (plexus-viz/plexus-prometheus) through the API server", hint: "kubectl -n plexus-viz logs deploy/plexus-prometheus",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthyViz()
			tc.breakIt(c)
			found := false
			for _, r := range c.checker(t).vizChecks(context.Background()) {
				if r.Name != tc.title {
					if r.Status != OK {
						t.Errorf("also failed: %s: %s", r.Name, r.Detail)
					}
					continue
				}
				found = true
				if r.Status != Fail || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Hint, tc.hint) {
					t.Errorf("%s: status %d, detail %q, hint %q; want a failure with %q, hint %q", r.Name, r.Status, r.Detail, r.Hint, tc.detail, tc.hint)
				}
			}
			if !found {
				t.Errorf("no check %q", tc.title)
			}
		})
	}
}

func TestVizManyFindingsBounded(t *testing.T) {
	c := healthyViz()
	for i := range 15 {
		c.pods = append(c.pods, meshedPod("big", fmt.Sprintf("p-%02d", i), now.Add(-time.Hour)))
	}
	var r Result
	for _, x := range c.checker(t).vizChecks(context.Background()) {
		if strings.HasPrefix(x.Name, "Prometheus") {
			r = x
		}
	}
	if !strings.Contains(r.Detail, "big/p-09 and 5 more") || strings.Contains(r.Detail, "p-10") {
		t.Errorf("detail %q: want ten pods named and 5 more", r.Detail)
	}
}

// TestRunIncludesViz: Checker.Run adds the viz checks when the namespace
// exists (here without the rest of the extension: they fail).
func TestRunIncludesViz(t *testing.T) {
	c := healthy(t)
	c.policy = append(c.policy, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: viznames.Namespace}})
	rs := c.run(Config{})
	if len(rs) != 15 {
		t.Fatalf("%d results, want 10 and 5 of viz", len(rs))
	}
	if r := rs[13]; !strings.HasPrefix(r.Name, "tap API") || r.Status != Fail {
		t.Errorf("result 14: %+v", r)
	}
}
