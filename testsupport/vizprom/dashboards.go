// Package vizprom reads the viz extension's Grafana dashboards
// (deploy/plexus-viz/grafana) and runs their PromQL against a Prometheus:
// the unit tests check each expression's names against the proxy's
// metrics, the cluster test runs each one as an instant query.
package vizprom

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Dashboard is the part of a Grafana dashboard's JSON model these checks
// read.
type Dashboard struct {
	File          string `json:"-"`
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Inputs        []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a panel, or a row holding panels when collapsed.
type Panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource"`
	Targets    []Target    `json:"targets"`
	Panels     []Panel     `json:"panels"`
}

// Datasource names the data source a panel or query uses.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// Variable is a template variable. Query holds a query variable's
// query: a string, or an object whose "query" is the string.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Datasource *Datasource     `json:"datasource"`
}

// QueryString returns a query variable's query.
func (v Variable) QueryString() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// Load reads every *.json file at the top of fsys as a dashboard, in
// name order.
func Load(fsys fs.FS) ([]Dashboard, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no dashboards (*.json)")
	}
	sort.Strings(names)
	var out []Dashboard
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		d.File = path.Base(name)
		out = append(out, d)
	}
	return out, nil
}

// AllPanels returns d's panels with the panels of collapsed rows, rows
// themselves included.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// Query is one PromQL expression of a dashboard: a panel's target, or a
// query variable's label_values selector turned into an expression.
type Query struct {
	Dashboard string // file name
	Panel     string // panel title, or "variable NAME"
	RefID     string
	Expr      string
}

func (q Query) String() string {
	return fmt.Sprintf("%s: %s %s: %s", q.Dashboard, q.Panel, q.RefID, q.Expr)
}

// Queries returns every expression of the dashboards in fsys: panels'
// targets, then variables' label_values selectors (label_values(S, l)
// becomes `group by (l) (S)`), with variables still unsubstituted.
func Queries(fsys fs.FS) ([]Query, error) {
	ds, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, d := range ds {
		for _, p := range d.AllPanels() {
			for _, t := range p.Targets {
				out = append(out, Query{Dashboard: d.File, Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
			}
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			expr, err := LabelValuesExpr(v.QueryString())
			if err != nil {
				return nil, fmt.Errorf("%s: variable %s: %w", d.File, v.Name, err)
			}
			out = append(out, Query{Dashboard: d.File, Panel: "variable " + v.Name, Expr: expr})
		}
	}
	return out, nil
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// LabelValuesExpr turns Grafana's label_values(SELECTOR, LABEL) into the
// PromQL expression whose series carry LABEL's values.
func LabelValuesExpr(q string) (string, error) {
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", fmt.Errorf("query %q is not label_values(selector, label)", q)
	}
	return fmt.Sprintf("group by (%s) (%s)", m[2], strings.TrimSpace(m[1])), nil
}

// BuiltinVariables are Grafana's own variables the dashboards may use.
var BuiltinVariables = []string{"__rate_interval", "__interval", "__range"}

var variableRE = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// Variables returns the names of the variables expr uses.
func Variables(expr string) []string {
	var out []string
	for _, m := range variableRE.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1]+m[2]+m[3])
	}
	return out
}

// Substitute replaces expr's variables ($name, ${name}, ${name:fmt},
// [[name]]) with their values in vars; it fails on a variable vars lacks.
func Substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := variableRE.ReplaceAllStringFunc(expr, func(s string) string {
		m := variableRE.FindStringSubmatch(s)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return s
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for variable(s) %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}
