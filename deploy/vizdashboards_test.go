package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/vizprom"
)

// The Grafana dashboards (plexus-viz/grafana/*.json) may only name metrics
// the proxy registers, with their labels, and the labels Prometheus's
// relabelling adds (prometheus-config.yaml).

// collectors records what a Registerer is given.
type collectors []prometheus.Collector

func (c *collectors) Register(x prometheus.Collector) error   { *c = append(*c, x); return nil }
func (c *collectors) MustRegister(xs ...prometheus.Collector) { *c = append(*c, xs...) }
func (c *collectors) Unregister(prometheus.Collector) bool    { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// proxySeries returns every series name the proxy's metrics expose (a
// histogram's _bucket, _sum and _count) with its label names.
func proxySeries(t *testing.T) map[string][]string {
	t.Helper()
	var cs collectors
	metrics.New(&cs, 10)
	out := map[string][]string{}
	for _, c := range cs {
		_, histogram := c.(*prometheus.HistogramVec)
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			n, l := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
			if n == nil || l == nil {
				t.Fatalf("cannot read %s", s)
			}
			var labels []string
			if l[1] != "" {
				labels = strings.Split(l[1], ",")
			}
			if !histogram {
				out[n[1]] = labels
				continue
			}
			out[n[1]+"_bucket"] = append(slices.Clone(labels), "le")
			out[n[1]+"_sum"] = labels
			out[n[1]+"_count"] = labels
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d proxy series found: %v", len(out), out)
	}
	return out
}

func TestVizDashboards(t *testing.T) {
	series := proxySeries(t)
	// Every target of the plexus-proxy job has these labels, and so has
	// every series scraped from it, Prometheus's up included.
	targetLabels := jobTargetLabels(t, "plexus-proxy")
	series["up"] = nil
	for name := range series {
		series[name] = append(series[name], targetLabels...)
	}

	dashboards, err := vizprom.Load(os.DirFS("plexus-viz/grafana"))
	if err != nil {
		t.Fatal(err)
	}
	var files, uids []string
	for _, d := range dashboards {
		files = append(files, d.File)
		if slices.Contains(uids, d.UID) || d.UID == "" {
			t.Errorf("%s: uid %q empty or not unique", d.File, d.UID)
		}
		uids = append(uids, d.UID)
		checkDashboard(t, d, series)
	}
	if want := []string{"plexus-namespace.json", "plexus-route.json", "plexus-workload.json"}; !slices.Equal(files, want) {
		t.Errorf("dashboards %v, want %v", files, want)
	}
}

// checkDashboard checks one dashboard's form (the data source is chosen at
// import, every panel queries it) and every expression's names.
func checkDashboard(t *testing.T, d vizprom.Dashboard, series map[string][]string) {
	t.Helper()
	errorf := func(format string, args ...any) { t.Errorf(d.File+": "+format, args...) }
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		errorf("schemaVersion %d, want about 39", d.SchemaVersion)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		errorf("__inputs %+v, want the one Prometheus data source DS_PROMETHEUS", d.Inputs)
	}
	ds := func(where string, s *vizprom.Datasource) {
		if s == nil || s.Type != "prometheus" || s.UID != "${DS_PROMETHEUS}" {
			errorf("%s: data source %+v, want ${DS_PROMETHEUS}", where, s)
		}
	}

	defined := slices.Clone(vizprom.BuiltinVariables)
	for _, v := range d.Templating.List {
		defined = append(defined, v.Name)
		if v.Type == "query" {
			ds("variable "+v.Name, v.Datasource)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.AllPanels() {
		if ids[p.ID] {
			errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		ds("panel "+p.Title, p.Datasource)
		if len(p.Targets) == 0 {
			errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil {
				ds("panel "+p.Title, tg.Datasource)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				errorf("panel %q query %s: empty expr", p.Title, tg.RefID)
			}
		}
	}

	qs, err := vizprom.Queries(os.DirFS("plexus-viz/grafana"))
	if err != nil {
		t.Fatal(err)
	}
	vars := vizprom.Vars("ns", "Deployment", "web")
	for _, q := range qs {
		if q.Dashboard != d.File {
			continue
		}
		for _, v := range vizprom.Variables(q.Expr) {
			if !slices.Contains(defined, v) {
				errorf("%s %s: variable $%s is not defined", q.Panel, q.RefID, v)
			}
		}
		expr, err := vizprom.Substitute(q.Expr, vars)
		if err == nil {
			err = checkNames(expr, series)
		}
		if err != nil {
			errorf("%s %s: %v\n\t%s", q.Panel, q.RefID, err, q.Expr)
		}
	}
}

// checkNames checks that expr is balanced, calls known functions, and
// names only series in series with their labels.
func checkNames(expr string, series map[string][]string) error {
	n, err := vizprom.Parse(expr)
	if err != nil {
		return err
	}
	var used []string // the labels of every series expr selects
	for _, m := range n.Metrics {
		ls, ok := series[m]
		if !ok {
			return fmt.Errorf("the proxy has no metric %q", m)
		}
		used = append(used, ls...)
	}
	var byName []string // labels of the series a __name__ regexp selects
	for _, re := range n.NameRegexps {
		r, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return fmt.Errorf("__name__=~%q: %v", re, err)
		}
		matched := false
		for name, ls := range series {
			if r.MatchString(name) {
				matched = true
				byName = append(byName, ls...)
			}
		}
		if !matched {
			return fmt.Errorf("__name__=~%q matches no proxy metric", re)
		}
	}
	used = append(used, byName...)
	if len(n.Metrics) == 0 && len(n.NameRegexps) == 0 {
		return fmt.Errorf("selects no metric")
	}
	for metric, labels := range n.Matchers {
		allowed := series[metric]
		if metric == "" {
			allowed = append(byName, "__name__")
		}
		for _, l := range labels {
			if !slices.Contains(allowed, l) {
				return fmt.Errorf("matcher on label %q, which %q does not have", l, metric)
			}
		}
	}
	for _, l := range n.Grouping {
		if !slices.Contains(used, l) {
			return fmt.Errorf("grouping by label %q, which no selected series has", l)
		}
	}
	return nil
}

// TestCheckNames proves checkNames catches what it is for.
func TestCheckNames(t *testing.T) {
	series := map[string][]string{
		"response_total":             {"direction", "namespace"},
		"response_latency_ms_bucket": {"direction", "le"},
	}
	for expr, ok := range map[string]bool{
		`sum by (direction) (rate(response_total{namespace="a"}[1m]))`:                            true,
		`histogram_quantile(0.5, sum by (le) (rate(response_latency_ms_bucket[1m])))`:             true,
		`group by (namespace) ({__name__=~"response_(total|foo)", namespace="x"})`:                true,
		`sum(rate(response_totals[1m]))`:                                                          false,
		`sum(rate(response_total{authority="x"}[1m]))`:                                            false,
		`sum by (le) (rate(response_total[1m]))`:                                                  false,
		`sum(rate(response_total[1m])`:                                                            false,
		`sum(rat(response_total[1m]))`:                                                            false,
		`group by (namespace) ({__name__=~"request_.*"})`:                                         false,
		`sum(rate(response_total[$__rate_interval]))`:                                             false,
		`sum by (direction) (rate(response_total[1m])) / sum by (direction) (response_total) > 0`: true,
	} {
		if err := checkNames(expr, series); (err == nil) != ok {
			t.Errorf("checkNames(%s) = %v, want ok=%v", expr, err, ok)
		}
	}
}
