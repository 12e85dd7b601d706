// Package stat shows live traffic statistics of namespaces, deployments or
// pods, read from their proxies' metrics through the API server's pod
// proxy (no Prometheus needed): two scrapes a window apart per meshed pod.
package stat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/meshstats"
	"github.com/plexus-mesh/plexus/control/meshpod"
)

// Resource is what one row stands for.
type Resource string

// Resources.
const (
	Namespaces  Resource = "namespace"
	Deployments Resource = "deployment"
	Pods        Resource = "pod"
)

// ParseResource accepts kubectl's names and short names.
func ParseResource(s string) (Resource, error) {
	switch s {
	case "ns", "namespace", "namespaces":
		return Namespaces, nil
	case "deploy", "deployment", "deployments":
		return Deployments, nil
	case "po", "pod", "pods":
		return Pods, nil
	}
	return "", fmt.Errorf("unknown resource %q: want ns|namespace, deploy|deployment or pod", s)
}

// AdminPort is the proxy's metrics port (DESIGN.md §2).
const AdminPort = "4191"

// Config selects what to measure.
type Config struct {
	Resource  Resource
	Name      string // one object; empty means all in Namespace (all namespaces for Namespaces)
	Namespace string // of deployments and pods
	Window    time.Duration
}

// Validate reports a setting that cannot be measured.
func (c Config) Validate() error {
	if _, err := ParseResource(string(c.Resource)); err != nil {
		return err
	}
	if c.Resource != Namespaces && c.Namespace == "" {
		return errors.New("no namespace")
	}
	if c.Window < 100*time.Millisecond || c.Window > 10*time.Minute {
		return fmt.Errorf("window %s: want between 100ms and 10m", c.Window)
	}
	return nil
}

// Row is one line of output.
type Row struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Meshed    int    `json:"meshedPods"`
	Total     int    `json:"totalPods"`
	meshstats.Stats
	// Errors names the meshed pods that could not be scraped; they are
	// left out of the figures.
	Errors []string `json:"errors,omitempty"`
}

// Scraper returns one pod's proxy metrics text.
type Scraper func(ctx context.Context, namespace, pod string) ([]byte, error)

// ProxyScraper scrapes through the API server's pod proxy to the admin
// port.
func ProxyScraper(client kubernetes.Interface) Scraper {
	return func(ctx context.Context, namespace, pod string) ([]byte, error) {
		b, err := client.CoreV1().Pods(namespace).ProxyGet("http", pod, AdminPort, "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("scraping %s/%s:%s/metrics through the API server: %w", namespace, pod, AdminPort, err)
		}
		return b, nil
	}
}

// Stat measures. Its fields are what tests replace.
type Stat struct {
	Client kubernetes.Interface
	Scrape Scraper
	// Sleep waits d or until ctx ends.
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time
}

// Sleep is the production Stat.Sleep.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// group is one row's pods.
type group struct {
	row  Row
	pods []*corev1.Pod // meshed and running: scraped
}

// Run measures cfg and returns one row per object, sorted by namespace
// and name.
func (s Stat) Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	groups, err := s.groups(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	var all []*corev1.Pod
	for _, g := range groups {
		all = append(all, g.pods...)
	}
	before := s.scrapeAll(ctx, all)
	start := s.Now()
	if err := s.Sleep(ctx, cfg.Window); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	after := s.scrapeAll(ctx, all)
	elapsed := s.Now().Sub(start)
	rows := make([]Row, 0, len(groups))
	for _, g := range groups {
		sum := meshstats.Counts{}
		for _, p := range g.pods {
			b, a := before[p], after[p]
			if b.err != nil || a.err != nil {
				g.row.Errors = append(g.row.Errors, fmt.Sprintf("%s: %v", p.Name, errors.Join(b.err, a.err)))
				continue
			}
			sum = meshstats.Add(sum, meshstats.Delta(b.counts, a.counts))
		}
		g.row.Stats = meshstats.Compute(sum, elapsed)
		rows = append(rows, g.row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows, nil
}

type scrapeResult struct {
	counts meshstats.Counts
	err    error
}

// scrapeAll scrapes pods concurrently, a few at a time.
func (s Stat) scrapeAll(ctx context.Context, pods []*corev1.Pod) map[*corev1.Pod]scrapeResult {
	out := make(map[*corev1.Pod]scrapeResult, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var r scrapeResult
			b, err := s.Scrape(ctx, p.Namespace, p.Name)
			if err == nil {
				r.counts, err = meshstats.Parse(b)
			}
			r.err = err
			mu.Lock()
			out[p] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// groups lists the pods of each row.
func (s Stat) groups(ctx context.Context, cfg Config) ([]*group, error) {
	switch cfg.Resource {
	case Namespaces:
		var names []string
		if cfg.Name != "" {
			if _, err := s.Client.CoreV1().Namespaces().Get(ctx, cfg.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("namespace %s: %w", cfg.Name, err)
			}
			names = []string{cfg.Name}
		} else {
			list, err := s.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing namespaces: %w", err)
			}
			for _, ns := range list.Items {
				names = append(names, ns.Name)
			}
		}
		var gs []*group
		for _, ns := range names {
			pods, err := s.pods(ctx, ns)
			if err != nil {
				return nil, err
			}
			gs = append(gs, newGroup(Row{Name: ns}, pods))
		}
		return gs, nil
	case Deployments:
		pods, err := s.pods(ctx, cfg.Namespace)
		if err != nil {
			return nil, err
		}
		deps := s.Client.AppsV1().Deployments(cfg.Namespace)
		list, err := deps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing deployments in %s: %w", cfg.Namespace, err)
		}
		var gs []*group
		for _, d := range list.Items {
			if cfg.Name != "" && d.Name != cfg.Name {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				return nil, fmt.Errorf("deployment %s/%s: selector: %w", d.Namespace, d.Name, err)
			}
			var mine []*corev1.Pod
			for _, p := range pods {
				if !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
					mine = append(mine, p)
				}
			}
			gs = append(gs, newGroup(Row{Namespace: d.Namespace, Name: d.Name}, mine))
		}
		if cfg.Name != "" && len(gs) == 0 {
			return nil, fmt.Errorf("deployment %s/%s not found", cfg.Namespace, cfg.Name)
		}
		return gs, nil
	default:
		pods, err := s.pods(ctx, cfg.Namespace)
		if err != nil {
			return nil, err
		}
		var gs []*group
		for _, p := range pods {
			if cfg.Name == "" || p.Name == cfg.Name {
				gs = append(gs, newGroup(Row{Namespace: p.Namespace, Name: p.Name}, []*corev1.Pod{p}))
			}
		}
		if cfg.Name != "" && len(gs) == 0 {
			return nil, fmt.Errorf("pod %s/%s not found (or not running)", cfg.Namespace, cfg.Name)
		}
		return gs, nil
	}
}

// pods lists a namespace's pods that have not finished.
func (s Stat) pods(ctx context.Context, ns string) ([]*corev1.Pod, error) {
	list, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func newGroup(r Row, pods []*corev1.Pod) *group {
	g := &group{row: r}
	g.row.Total = len(pods)
	for _, p := range pods {
		if !meshpod.IsMeshed(p) {
			continue
		}
		g.row.Meshed++
		if p.Status.Phase == corev1.PodRunning {
			g.pods = append(g.pods, p)
		}
	}
	return g
}
