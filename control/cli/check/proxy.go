package check

// plexusctl check --proxy: the data plane of one namespace (or all).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/inject"
	"github.com/plexus-mesh/plexus/control/meshpod"
)

// Data-plane thresholds.
const (
	// CertWarnLeft warns about a proxy certificate with less than this
	// left: proxies renew at 70 % of a 24 h lifetime, with 7 h left.
	CertWarnLeft = 6 * time.Hour
	// RedirectEventWindow is how far back the node agents' Events about
	// pods without redirect rules count.
	RedirectEventWindow = time.Hour
	// maxScrapes bounds the proxies whose certificates one check reads.
	maxScrapes = 100
	// certMetric is the proxy's certificate expiry gauge.
	certMetric = "identity_cert_expiration_timestamp_seconds"
)

// Redirect Events of the node agent (daemonset/repair).
var redirectEvents = []string{"RedirectMissing", "RedirectRepairFailed"}

// Scraper returns one pod's proxy metrics text (stat.ProxyScraper).
type Scraper func(ctx context.Context, namespace, pod string) ([]byte, error)

// proxyChecks are the data-plane checks of the running pods of ns ("":
// every namespace).
func (c Checker) proxyChecks(ctx context.Context, ns string) []Result {
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []Result{fail("data plane: pods can be listed", "", "listing pods: %v", err)}
	}
	var running []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	meshed := running[:0:0]
	for _, p := range running {
		if meshpod.IsMeshed(&p) {
			meshed = append(meshed, p)
		}
	}
	return []Result{
		c.proxyVersions(ctx, meshed),
		c.proxyCertificates(ctx, meshed),
		c.redirects(ctx, ns, meshed),
		c.injectionPending(ctx, running),
	}
}

// proxyVersions: every proxy runs the control plane's version (the
// injector's --proxy-version).
func (c Checker) proxyVersions(ctx context.Context, meshed []corev1.Pod) Result {
	const name = "data plane: proxies run the control plane's version"
	want, err := c.controlPlaneProxyVersion(ctx)
	if err != nil {
		return fail(name, installHint, "%v", err)
	}
	var old []string
	for _, p := range meshed {
		if v := p.Labels[inject.LabelProxyVersion]; v != want {
			old = append(old, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, v))
		}
	}
	if len(old) == 0 {
		return ok(name)
	}
	return Result{Name: name, Status: Warn, Detail: fmt.Sprintf("%d of %d proxies are not %s: %s", len(old), len(meshed), want, listed(old)),
		Hint: "restart their workloads (kubectl rollout restart) to give them the current proxy"}
}

// controlPlaneProxyVersion is the injector's --proxy-version.
func (c Checker) controlPlaneProxyVersion(ctx context.Context) (string, error) {
	d, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, InjectorName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the injector's Deployment: %w", err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--proxy-version="); ok {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("Deployment %s/%s has no --proxy-version", Namespace, InjectorName)
}

// proxyCertificates: every proxy holds a certificate with time left,
// read from its metrics through the API server.
func (c Checker) proxyCertificates(ctx context.Context, meshed []corev1.Pod) Result {
	const name = "data plane: proxies hold valid certificates"
	if c.Scrape == nil {
		return Result{Name: name, Status: Warn, Detail: "not checked: no way to read the proxies' metrics"}
	}
	now := c.Now()
	var expired, soon, unknown []string
	checked := 0
	for _, p := range meshed {
		if checked == maxScrapes {
			break
		}
		checked++
		id := p.Namespace + "/" + p.Name
		b, err := c.Scrape(ctx, p.Namespace, p.Name)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%s (%v)", id, err))
			continue
		}
		v, found := gauge(b, certMetric)
		switch {
		case !found:
			unknown = append(unknown, id+" (an older proxy: no "+certMetric+")")
		case v == 0:
			expired = append(expired, id+" (no certificate yet)")
		case time.Unix(int64(v), 0).Before(now):
			expired = append(expired, fmt.Sprintf("%s (expired %s ago)", id, now.Sub(time.Unix(int64(v), 0)).Round(time.Minute)))
		case time.Unix(int64(v), 0).Sub(now) < CertWarnLeft:
			soon = append(soon, fmt.Sprintf("%s (%s left)", id, time.Unix(int64(v), 0).Sub(now).Round(time.Minute)))
		}
	}
	switch {
	case len(expired) > 0:
		return fail(name, "the identity service must be reachable from these pods: plexusctl check, and their proxy logs (component identity)",
			"%d proxies without a valid certificate: %s", len(expired), listed(expired))
	case len(soon) > 0 || len(unknown) > 0:
		var parts []string
		if len(soon) > 0 {
			parts = append(parts, fmt.Sprintf("%d renew late: %s", len(soon), listed(soon)))
		}
		if len(unknown) > 0 {
			parts = append(parts, fmt.Sprintf("%d not read: %s", len(unknown), listed(unknown)))
		}
		return Result{Name: name, Status: Warn, Detail: strings.Join(parts, "; ")}
	}
	if checked < len(meshed) {
		return Result{Name: name, Status: OK, Detail: fmt.Sprintf("read %d of %d proxies", checked, len(meshed))}
	}
	return ok(name)
}

// redirects: no meshed pod that runs now was reported by its node agent
// as running without its redirect rules (RedirectEventWindow).
func (c Checker) redirects(ctx context.Context, ns string, meshed []corev1.Pod) Result {
	const name = "data plane: meshed pods have their redirect rules"
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,type=Warning"})
	if err != nil {
		return fail(name, "", "listing Events: %v", err)
	}
	live := map[string]bool{} // UID of running meshed pods
	for _, p := range meshed {
		live[string(p.UID)] = true
	}
	since := c.Now().Add(-RedirectEventWindow)
	bad := map[string]string{}
	for _, e := range events.Items {
		if !live[string(e.InvolvedObject.UID)] || !slices.Contains(redirectEvents, e.Reason) || lastSeen(e).Before(since) {
			continue
		}
		bad[e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name] = e.Reason
	}
	if len(bad) == 0 {
		return ok(name)
	}
	var names []string
	for p, reason := range bad {
		names = append(names, p+" ("+reason+")")
	}
	sort.Strings(names)
	return fail(name, "their traffic may bypass the proxy: see the node agent's log and kubectl describe pod; deleting the pod gives it rules again",
		"%d pods: %s", len(names), listed(names))
}

// injectionPending: no running pod asks for the proxy without having it
// (started before its namespace opted in, or while the injector was down).
func (c Checker) injectionPending(ctx context.Context, running []corev1.Pod) Result {
	const name = "data plane: pods that ask for the proxy run it"
	namespaces := map[string]*corev1.Namespace{}
	var pending []string
	for _, p := range running {
		if p.Namespace == Namespace || p.Namespace == "kube-system" {
			continue
		}
		ns, seen := namespaces[p.Namespace]
		if !seen {
			got, err := c.Client.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{})
			if err == nil {
				ns = got
			}
			namespaces[p.Namespace] = ns
		}
		if d, err := inject.Decide(&p, ns); err == nil && d.Inject {
			pending = append(pending, p.Namespace+"/"+p.Name)
		}
	}
	if len(pending) == 0 {
		return ok(name)
	}
	return Result{Name: name, Status: Warn, Detail: fmt.Sprintf("%d pods without a proxy although injection is enabled: %s", len(pending), listed(pending)),
		Hint: "restart them (kubectl rollout restart) so the injector adds the proxy"}
}

// gauge reads an unlabelled sample of the Prometheus text format.
func gauge(b []byte, metric string) (float64, bool) {
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), metric+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func lastSeen(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// listed names up to five items, then how many more.
func listed(items []string) string {
	sort.Strings(items)
	if len(items) <= 5 {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
}
