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

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/meshstats"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Resource is what one row stands for.
type Resource string

// Resources.
const (
	Namespaces  Resource = "namespace"
	Deployments Resource = "deployment"
	Pods        Resource = "pod"
)

// Kinds are the kinds stat takes, in the order hints list them.
var Kinds = []kinds.Kind{kinds.Namespaces, kinds.Deployments, kinds.Pods}

// ParseTarget reads one object from kubectl-style arguments: KIND/NAME or
// KIND NAME, KIND one of Kinds.
func ParseTarget(args []string) (Resource, string, error) {
	k, name, err := kinds.ParseTarget(args, Kinds...)
	return Resource(k.Singular()), name, err
}

// ParseKindAndName reads kubectl-style arguments naming every object of a
// kind (KIND) or one (KIND/NAME or KIND NAME); name is "" for every one.
func ParseKindAndName(args []string) (Resource, string, error) {
	k, name, err := kinds.ParseKindOrTarget(args, Kinds...)
	return Resource(k.Singular()), name, err
}

// AdminPort is the proxy's metrics port (ARCHITECTURE.md §2).
const AdminPort = "4191"

// Config selects what to measure.
type Config struct {
	Resource  Resource
	Name      string // one object; empty means all in Namespace (all namespaces for Namespaces)
	Namespace string // of deployments and pods
	Window    time.Duration
	// Outbound measures the objects' outbound requests instead, one row
	// per cluster their endpoints were in (Row.ToCluster).
	Outbound bool
}

// ErrNotFound: the object named is not there.
var ErrNotFound = errors.New("not found")

// Validate reports a setting that cannot be measured.
func (c Config) Validate() error {
	if _, err := kinds.Parse(string(c.Resource), Kinds...); err != nil {
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
	// ToCluster, of an outbound row (Config.Outbound), is the linked
	// cluster (its Link's name) the requests went to; "" for this one.
	ToCluster string `json:"toCluster,omitempty"`
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

// Target is one object measured: its pods, and how many are meshed.
type Target struct {
	Namespace, Name string
	Meshed, Total   int
	Pods            []*corev1.Pod // meshed and running: the ones to scrape
}

// Run measures cfg and returns one row per object, sorted by namespace
// and name.
func (s Stat) Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	targets, err := s.Targets(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	var all []*corev1.Pod
	for _, t := range targets {
		all = append(all, t.Pods...)
	}
	m, err := s.Measure(ctx, all, cfg.Window)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	direction, by := meshstats.Inbound, ""
	if cfg.Outbound {
		direction, by = meshstats.Outbound, meshstats.DstCluster
	}
	rows := make([]Row, 0, len(targets))
	for _, t := range targets {
		var errs []string
		sums := map[string]meshstats.Counts{}
		for _, p := range t.Pods {
			var b, a map[string]meshstats.Counts
			err := m.Err(p)
			if err == nil {
				b, err = meshstats.ParseBy(m.Before[p].Text, direction, by)
			}
			if err == nil {
				a, err = meshstats.ParseBy(m.After[p].Text, direction, by)
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", p.Name, err))
				continue
			}
			for k, after := range a {
				sums[k] = meshstats.Add(sums[k], meshstats.Delta(b[k], after))
			}
		}
		if len(sums) == 0 {
			sums[""] = meshstats.Counts{}
		}
		for cluster, sum := range sums {
			rows = append(rows, Row{Namespace: t.Namespace, Name: t.Name, Meshed: t.Meshed, Total: t.Total,
				ToCluster: cluster, Stats: meshstats.Compute(sum, m.Elapsed), Errors: errs})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		if rows[i].Name != rows[j].Name {
			return rows[i].Name < rows[j].Name
		}
		return rows[i].ToCluster < rows[j].ToCluster
	})
	return rows, nil
}

// Scrape is one pod's metrics text, or why there is none.
type Scrape struct {
	Text []byte
	Err  error
}

// Measurement is two scrapes of each pod, Elapsed apart.
type Measurement struct {
	Before, After map[*corev1.Pod]Scrape
	Elapsed       time.Duration
}

// Err is why p has no pair of scrapes; nil when it has.
func (m Measurement) Err(p *corev1.Pod) error {
	return errors.Join(m.Before[p].Err, m.After[p].Err)
}

// Measure scrapes every pod, waits window, and scrapes them again.
func (s Stat) Measure(ctx context.Context, pods []*corev1.Pod, window time.Duration) (Measurement, error) {
	before := s.scrapeAll(ctx, pods)
	start := s.Now()
	if err := s.Sleep(ctx, window); err != nil {
		return Measurement{}, err
	}
	after := s.scrapeAll(ctx, pods)
	return Measurement{Before: before, After: after, Elapsed: s.Now().Sub(start)}, nil
}

// scrapeAll scrapes pods concurrently, a few at a time.
func (s Stat) scrapeAll(ctx context.Context, pods []*corev1.Pod) map[*corev1.Pod]Scrape {
	out := make(map[*corev1.Pod]Scrape, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b, err := s.Scrape(ctx, p.Namespace, p.Name)
			r := Scrape{Text: b, Err: err}
			mu.Lock()
			out[p] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Targets lists the objects cfg names, with their pods.
func (s Stat) Targets(ctx context.Context, cfg Config) ([]Target, error) {
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
		var gs []Target
		for _, ns := range names {
			pods, err := s.pods(ctx, ns)
			if err != nil {
				return nil, err
			}
			gs = append(gs, newTarget("", ns, pods))
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
		var gs []Target
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
			gs = append(gs, newTarget(d.Namespace, d.Name, mine))
		}
		if cfg.Name != "" && len(gs) == 0 {
			return nil, fmt.Errorf("deployment %s/%s %w", cfg.Namespace, cfg.Name, ErrNotFound)
		}
		return gs, nil
	default:
		pods, err := s.pods(ctx, cfg.Namespace)
		if err != nil {
			return nil, err
		}
		var gs []Target
		for _, p := range pods {
			if cfg.Name == "" || p.Name == cfg.Name {
				gs = append(gs, newTarget(p.Namespace, p.Name, []*corev1.Pod{p}))
			}
		}
		if cfg.Name != "" && len(gs) == 0 {
			return nil, fmt.Errorf("pod %s/%s %w (or not running)", cfg.Namespace, cfg.Name, ErrNotFound)
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

func newTarget(namespace, name string, pods []*corev1.Pod) Target {
	t := Target{Namespace: namespace, Name: name, Total: len(pods)}
	for _, p := range pods {
		if !meshpod.IsMeshed(p) {
			continue
		}
		t.Meshed++
		if p.Status.Phase == corev1.PodRunning {
			t.Pods = append(t.Pods, p)
		}
	}
	return t
}
