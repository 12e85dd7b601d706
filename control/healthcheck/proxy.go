package healthcheck

// plexusctl check --proxy: the data plane of one namespace (or all).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/inject"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Data-plane thresholds.
const (
	// CertWarnLeft warns about a proxy certificate with less than this
	// left: proxies renew at 70 % of a 24 h lifetime, with 7 h left.
	CertWarnLeft = 6 * time.Hour
	// maxScrapes bounds the proxies whose certificates one check reads;
	// scrapeTimeout bounds each read, scrapeWorkers read at once.
	maxScrapes    = 100
	scrapeTimeout = 5 * time.Second
	scrapeWorkers = 8
	// certMetric is the proxy's certificate expiry gauge.
	certMetric = "identity_cert_expiration_timestamp_seconds"
)

// The node agent's Events about a pod's redirect rules (daemonset/repair's
// reasons): the latest one of a running pod tells whether it has them.
const (
	reasonRepaired     = "RedirectRepaired"
	reasonMissing      = "RedirectMissing"
	reasonRepairFailed = "RedirectRepairFailed"
)

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
	read := meshed[:min(len(meshed), maxScrapes)]
	type reading struct {
		v     float64
		found bool
		err   error
	}
	readings := make([]reading, len(read))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(scrapeWorkers, len(read)) {
		wg.Go(func() {
			for i := range next {
				sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
				b, err := c.Scrape(sctx, read[i].Namespace, read[i].Name)
				cancel()
				r := reading{err: err}
				if err == nil {
					r.v, r.found = gauge(b, certMetric)
				}
				readings[i] = r
			}
		})
	}
	for i := range read {
		next <- i
	}
	close(next)
	wg.Wait()
	var expired, soon, unknown []string
	checked := len(read)
	for i, p := range read {
		id := p.Namespace + "/" + p.Name
		r := readings[i]
		expiry := time.Unix(int64(r.v), 0)
		switch {
		case r.err != nil:
			unknown = append(unknown, fmt.Sprintf("%s (%v)", id, r.err))
		case !r.found:
			unknown = append(unknown, id+" (an older proxy: no "+certMetric+")")
		case r.v == 0 && !podReady(p):
			unknown = append(unknown, id+" (starting: no certificate yet)")
		case r.v == 0:
			expired = append(expired, id+" (no certificate)")
		case expiry.Before(now):
			expired = append(expired, fmt.Sprintf("%s (expired %s ago)", id, now.Sub(expiry).Round(time.Minute)))
		case expiry.Sub(now) < CertWarnLeft:
			soon = append(soon, fmt.Sprintf("%s (%s left)", id, expiry.Sub(now).Round(time.Minute)))
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

// redirects: the redirect rules of the running meshed pods, as far as
// the cluster shows them. Two witnesses: the proxy's readiness probe, which
// the injector points at a port nothing listens on, so it passes only
// through the pod's inbound REDIRECT (the outbound rules are written in
// the same transaction but are not probed); and the node agent's Events
// (daemonset/repair), which report a pod found without its rules. A pod
// reported and not repaired since fails; so does a ready pod whose proxy
// probe is not passing. Pods neither can vouch for (no redirect probe, no
// agent on their node, as in node-image mode) are named in a warning: the
// check says it could not check them rather than passing them. The agent
// reports a pod once; the API server keeps Events an hour by default, so
// an older report is not seen (the agent's log and plexus_node_repair
// metrics keep it).
func (c Checker) redirects(ctx context.Context, ns string, meshed []corev1.Pod) Result {
	const name = "data plane: meshed pods have their redirect rules"
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod"})
	if err != nil {
		return fail(name, "", "listing Events: %v", err)
	}
	live := map[string]bool{} // UID of running meshed pods
	for _, p := range meshed {
		live[string(p.UID)] = true
	}
	latest := map[string]corev1.Event{} // pod UID → its latest redirect Event
	for _, e := range events.Items {
		uid := string(e.InvolvedObject.UID)
		switch e.Reason {
		case reasonRepaired, reasonMissing, reasonRepairFailed:
		default:
			continue
		}
		if prev, ok := latest[uid]; live[uid] && (!ok || lastSeen(e).After(lastSeen(prev))) {
			latest[uid] = e
		}
	}
	var bad, unproven []string
	proven := 0
	for _, p := range meshed {
		id := p.Namespace + "/" + p.Name
		if e, ok := latest[string(p.UID)]; ok && e.Reason != reasonRepaired {
			bad = append(bad, id+" ("+e.Reason+")")
			continue
		}
		switch redirectProofOf(&p) {
		case proofProbe:
			proven++
		case proofPending:
			unproven = append(unproven, id+" (its redirect probe is not passing yet)")
		default:
			unproven = append(unproven, id+" (no redirect probe: injected by an older injector or by hand)")
		}
	}
	if len(bad) > 0 {
		return fail(name, "their traffic may bypass the proxy: see the node agent's log and kubectl describe pod; deleting the pod gives it rules again",
			"%d pods: %s", len(bad), listed(bad))
	}
	if len(unproven) > 0 {
		return Result{Name: name, Status: Warn, Detail: fmt.Sprintf("%d of %d proven by their proxy's redirect probe; could not check %d: %s",
			proven, len(meshed), len(unproven), listed(unproven)),
			Hint: "a pod the node agent has not reported and whose probe does not pass may lack its rules: kubectl describe pod; restarting it gives it rules and the probe"}
	}
	return Result{Name: name, Status: OK, Detail: fmt.Sprintf("%d of %d proven by their proxy's redirect probe (inbound, within its period); none reported by a node agent", proven, len(meshed))}
}

// injectionPending: no running pod the injector's webhook selects runs
// without the proxy (started before its namespace opted in, or while the
// injector was down). The webhook selects by label (deploy/plexus-control/
// webhook.yaml): a namespace labelled plexus.dev/inject=enabled and a pod
// not labelled disabled, or a pod labelled enabled; never kube-system or
// plexus-system, nor host-network pods.
func (c Checker) injectionPending(ctx context.Context, running []corev1.Pod) Result {
	const name = "data plane: pods that ask for the proxy run it"
	nsEnabled := map[string]bool{}
	seen := map[string]bool{}
	var pending []string
	for _, p := range running {
		if p.Namespace == Namespace || p.Namespace == "kube-system" || p.Spec.HostNetwork || meshpod.IsMeshed(&p) {
			continue
		}
		if !seen[p.Namespace] {
			seen[p.Namespace] = true
			if ns, err := c.Client.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{}); err == nil {
				nsEnabled[p.Namespace] = ns.Labels[inject.AnnotationInject] == "enabled"
			}
		}
		podSetting := p.Labels[inject.AnnotationInject]
		if podSetting == "enabled" || nsEnabled[p.Namespace] && podSetting != "disabled" {
			pending = append(pending, p.Namespace+"/"+p.Name)
		}
	}
	if len(pending) == 0 {
		return ok(name)
	}
	return Result{Name: name, Status: Warn, Detail: fmt.Sprintf("%d pods without a proxy although injection is enabled: %s", len(pending), listed(pending)),
		Hint: "restart them (kubectl rollout restart) so the injector adds the proxy"}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
