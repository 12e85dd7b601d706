package vizprom

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestParse(t *testing.T) {
	n, err := Parse(`histogram_quantile(0.95, sum by (le, authority) (rate(response_latency_ms_bucket{namespace="a", direction=~"in.*"}[1m])))
		/ on (authority) group_left sum(rate(response_total[5m:1m] offset 1m)) without (pod) > bool 0
		or {__name__=~"outbound_(http|grpc)_route_retry_requests_total", route_name!=""}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"response_latency_ms_bucket", "response_total"}; !slices.Equal(n.Metrics, want) {
		t.Errorf("metrics %v, want %v", n.Metrics, want)
	}
	if want := []string{"outbound_(http|grpc)_route_retry_requests_total"}; !slices.Equal(n.NameRegexps, want) {
		t.Errorf("name regexps %v, want %v", n.NameRegexps, want)
	}
	if want := []string{"le", "authority", "authority", "pod"}; !slices.Equal(n.Grouping, want) {
		t.Errorf("grouping %v, want %v", n.Grouping, want)
	}
	if got := n.Matchers["response_latency_ms_bucket"]; !slices.Equal(got, []string{"namespace", "direction"}) {
		t.Errorf("matchers %v", n.Matchers)
	}
	if got := n.Matchers[""]; !slices.Equal(got, []string{"__name__", "route_name"}) {
		t.Errorf("matchers %v", n.Matchers)
	}
	if want := []string{"histogram_quantile", "sum", "rate", "sum", "rate"}; !slices.Equal(n.Functions, want) {
		t.Errorf("functions %v, want %v", n.Functions, want)
	}

	for _, bad := range []string{
		``, `sum(rate(x[1m])`, `sum(rate(x[1m)))`, `x{a="b"`, `x{a="b}`, `frobnicate(x)`,
		`rate(x[$__rate_interval])`, `x{a="b"}]`,
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"namespace": "demo", "route": ".*", "__rate_interval": "1m"}
	got, err := Substitute(`x{namespace="$namespace", route=~"${route}", r=~"${route:regex}", n="[[namespace]]"}[$__rate_interval]`, vars)
	if want := `x{namespace="demo", route=~".*", r=~".*", n="demo"}[1m]`; err != nil || got != want {
		t.Errorf("Substitute = %q, %v; want %q", got, err, want)
	}
	if _, err := Substitute(`x{a="$missing"}`, vars); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Substitute with a missing variable: %v", err)
	}
	if got := Variables(`x{a="$a", b="${b}"}[$__rate_interval]`); !slices.Equal(got, []string{"a", "b", "__rate_interval"}) {
		t.Errorf("Variables = %v", got)
	}
}

func TestLabelValuesExpr(t *testing.T) {
	for q, want := range map[string]string{
		`label_values(response_total, namespace)`:                             `group by (namespace) (response_total)`,
		`label_values(response_total{namespace="$namespace"}, workload_name)`: `group by (workload_name) (response_total{namespace="$namespace"})`,
		` label_values({__name__=~"a|b", x=~"y, z"}, route_name) `:            `group by (route_name) ({__name__=~"a|b", x=~"y, z"})`,
		`query_result(up)`:        ``,
		`label_values(namespace)`: ``,
	} {
		got, err := LabelValuesExpr(q)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("LabelValuesExpr(%q) = %q, %v; want %q", q, got, err, want)
		}
	}
}

const testDashboard = `{
  "uid": "t", "title": "T", "schemaVersion": 39,
  "panels": [
    {"id": 1, "type": "row", "title": "r", "collapsed": true, "panels": [
      {"id": 2, "type": "timeseries", "title": "inner", "targets": [{"refId": "A", "expr": "sum(rate(response_total{namespace=\"$namespace\"}[$__rate_interval]))"}]}
    ]},
    {"id": 3, "type": "stat", "title": "bad", "targets": [{"refId": "A", "expr": "nonsense(("}]}
  ],
  "templating": {"list": [
    {"name": "namespace", "type": "query", "query": {"query": "label_values(response_total, namespace)"}},
    {"name": "interval", "type": "interval", "query": "1m,5m"}
  ]}
}`

// fakePrometheus answers /api/v1/query: a vector of one sample for
// queries naming response_total, an error for anything else.
func fakePrometheus(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.ParseForm() != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Form.Get("query"), "response_total") {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`))
			return
		}
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.5"]}]}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestRunAndCheckAgainst(t *testing.T) {
	fsys := fstest.MapFS{"t.json": {Data: []byte(testDashboard)}, "notes.txt": {Data: []byte("not a dashboard")}}
	qs, err := Queries(fsys)
	if err != nil {
		t.Fatal(err)
	}
	var panels []string
	for _, q := range qs {
		panels = append(panels, q.Panel)
	}
	if want := []string{"inner", "bad", "variable namespace"}; !slices.Equal(panels, want) {
		t.Fatalf("queries of %v, want %v", panels, want)
	}

	s := fakePrometheus(t)
	rs, err := Run(context.Background(), s.Client(), s.URL, fsys, Vars("demo", "Deployment", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || rs[0].Series != 1 || rs[0].Expr != `sum(rate(response_total{namespace="demo"}[1m]))` {
		t.Errorf("inner: %+v", rs[0])
	}
	if rs[1].Err == nil || !strings.Contains(rs[1].Err.Error(), "bad_data") {
		t.Errorf("bad: %+v", rs[1])
	}
	if rs[2].Err != nil || rs[2].Expr != `group by (namespace) (response_total)` {
		t.Errorf("variable: %+v", rs[2])
	}

	errs := CheckAgainst(context.Background(), s.URL, fsys, Vars("demo", "Deployment", "web"))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "t.json: bad A") {
		t.Errorf("CheckAgainst = %v, want the one error of panel bad", errs)
	}
	if errs := CheckAgainst(context.Background(), s.URL, fsys, map[string]string{}); len(errs) != 2 {
		t.Errorf("CheckAgainst without variables = %v, want 2 errors", errs)
	}
}
