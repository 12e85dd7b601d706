package healthcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/viz/viznames"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// The viz extension's checks (deploy/plexus-viz) run when its namespace
// exists.

// apiServices is the resource of APIService objects.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// vizDeployments must be available.
var vizDeployments = []string{viznames.TapDeployment, viznames.WebDeployment, viznames.PrometheusDeployment}

const (
	vizInstallHint = "install the viz extension: plexusctl viz install | kubectl apply -f -"
	// prometheusPort is the Prometheus Service's port.
	prometheusPort = "9090"
	// ScrapeGrace is how long a new pod may run before Prometheus must
	// scrape it: its discovery and one 10 s scrape interval, with margin.
	ScrapeGrace = time.Minute
	// maxTargetFindings bounds the pods one failure names.
	maxTargetFindings = 10
)

// vizChecks returns the viz extension's results, none when it is not
// installed (its namespace does not exist).
func (c Checker) vizChecks(ctx context.Context) []Result {
	_, err := c.Client.CoreV1().Namespaces().Get(ctx, viznames.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return []Result{fail("viz extension namespace "+viznames.Namespace+" is readable", "check access to the cluster", "reading Namespace %s: %v", viznames.Namespace, err)}
	}
	var rs []Result
	for _, name := range vizDeployments {
		rs = append(rs, c.deploymentIn(ctx, viznames.Namespace, name, "viz Deployment "+name+" is available", vizInstallHint))
	}
	return append(rs, c.tapAPIService(ctx), c.proxyTargets(ctx))
}

func (c Checker) tapAPIService(ctx context.Context) Result {
	title := "tap API (APIService " + viznames.APIService + ") is available"
	hint := fmt.Sprintf("kubectl get apiservice %s -o yaml; kubectl -n %s logs deploy/%s", viznames.APIService, viznames.Namespace, viznames.TapDeployment)
	u, err := c.Policy.Dynamic.Resource(apiServices).Get(ctx, viznames.APIService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(title, vizInstallHint, "APIService %s not found", viznames.APIService)
	}
	if err != nil {
		return fail(title, "check access to the cluster", "reading APIService %s: %v", viznames.APIService, err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, co := range conds {
		m, _ := co.(map[string]any)
		if m["type"] != "Available" {
			continue
		}
		if m["status"] == string(metav1.ConditionTrue) {
			return ok(title)
		}
		return fail(title, hint, "Available is %v: %v: %v", m["status"], m["reason"], m["message"])
	}
	return fail(title, hint, "no Available condition yet")
}

// proxyTargets compares Prometheus's proxy targets (up{job="plexus-proxy"},
// asked through the API server's service proxy) with the meshed pods
// that have run for ScrapeGrace.
func (c Checker) proxyTargets(ctx context.Context) Result {
	title := "Prometheus scrapes every meshed pod's proxy"
	up, err := c.queryUp(ctx)
	if err != nil {
		return fail(title, fmt.Sprintf("kubectl -n %s logs deploy/%s", viznames.Namespace, viznames.PrometheusDeployment), "%v", err)
	}
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fail(title, "check access to the cluster", "listing pods: %v", err)
	}
	now := c.Now()
	var missing, down []string
	namespaces := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !meshpod.IsMeshed(p) || p.Status.Phase != corev1.PodRunning || p.Status.StartTime == nil || now.Sub(p.Status.StartTime.Time) < ScrapeGrace {
			continue
		}
		name := p.Namespace + "/" + p.Name
		switch v, found := up[name]; {
		case !found:
			missing = append(missing, name)
		case v != 1:
			down = append(down, name)
			namespaces[p.Namespace] = true
		}
	}
	if len(missing) == 0 && len(down) == 0 {
		return ok(title)
	}
	var parts []string
	if len(down) > 0 {
		parts = append(parts, "scrapes failing: "+names(down))
	}
	if len(missing) > 0 {
		parts = append(parts, "not a target: "+names(missing))
	}
	hint := fmt.Sprintf("look at Prometheus's targets: kubectl -n %s port-forward svc/%s %s, then http://localhost:%s/targets", viznames.Namespace, vizquery.PrometheusService, prometheusPort, prometheusPort)
	if len(down) > 0 {
		var nss []string
		for ns := range namespaces {
			nss = append(nss, ns)
		}
		sort.Strings(nss)
		hint = fmt.Sprintf("a default inbound policy that is not all-unauthenticated refuses Prometheus (unmeshed): plexusctl viz allow-scrapes -n NAMESPACE | kubectl apply -f - for %s; or %s", strings.Join(nss, ", "), hint)
	}
	return fail(title, hint, "%s", strings.Join(parts, "; "))
}

// names lists the first few of ns, sorted, and how many more there are.
func names(ns []string) string {
	sort.Strings(ns)
	if len(ns) <= maxTargetFindings {
		return strings.Join(ns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ns[:maxTargetFindings], ", "), len(ns)-maxTargetFindings)
}

// queryUp asks Prometheus, through the API server's service proxy, for
// up{job="plexus-proxy"} and returns its value per namespace/pod.
func (c Checker) queryUp(ctx context.Context) (map[string]float64, error) {
	q := fmt.Sprintf("up{job=%q}", vizquery.ProxyJob)
	res := c.Client.CoreV1().Services(viznames.Namespace).ProxyGet("http", vizquery.PrometheusService, prometheusPort, "/api/v1/query", map[string]string{"query": q})
	if res == nil { // a fake client without a proxy reactor
		return nil, fmt.Errorf("querying Prometheus (%s/%s) through the API server: no answer", viznames.Namespace, vizquery.PrometheusService)
	}
	raw, err := res.DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("querying Prometheus (%s/%s) through the API server: %w", viznames.Namespace, vizquery.PrometheusService, err)
	}
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("Prometheus answered %s to %s: %w", truncate(raw), q, err)
	}
	if ans.Status != "success" || ans.Data.ResultType != "vector" {
		return nil, fmt.Errorf("Prometheus answered %s to %s: %s", ans.Status, q, ans.Error)
	}
	out := map[string]float64{}
	for _, s := range ans.Data.Result {
		v, _ := s.Value[1].(string)
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil {
			return nil, fmt.Errorf("Prometheus answered the value %q to %s", v, q)
		}
		key := s.Metric["namespace"] + "/" + s.Metric["pod"]
		out[key] = max(out[key], f) // a pod scraped twice is up if one scrape is
	}
	return out, nil
}

func truncate(b []byte) string {
	const n = 200
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
