package vizprom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Vars returns the values of the dashboards' variables for one workload
// (kind as the workload_kind label has it: Deployment, StatefulSet, …),
// every route and Service, and a rate interval that spans several of the
// 10 s scrapes.
func Vars(namespace, kind, workload string) map[string]string {
	return map[string]string{
		"namespace": namespace, "kind": kind, "workload": workload,
		"parent": ".*", "route": ".*",
		"__rate_interval": "1m", "__interval": "15s", "__range": "30m",
	}
}

// Result is the answer to one instant query.
type Result struct {
	Query  Query
	Expr   string // with the variables substituted
	Series int    // series in the result (a vector's samples; 1 for a scalar)
	Err    error
}

// Run runs every query of the dashboards in fsys, variables substituted
// from vars, as an instant query against the Prometheus at promURL
// (http://host:port) and returns one Result per query.
func Run(ctx context.Context, c *http.Client, promURL string, fsys fs.FS, vars map[string]string) ([]Result, error) {
	qs, err := Queries(fsys)
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(qs))
	for _, q := range qs {
		r := Result{Query: q}
		if r.Expr, r.Err = Substitute(q.Expr, vars); r.Err == nil {
			r.Series, r.Err = InstantQuery(ctx, c, promURL, r.Expr)
		}
		out = append(out, r)
	}
	return out, nil
}

// CheckAgainst runs every dashboard query (Run) and returns an error for
// each one Prometheus refused or could not answer; a query that matches
// no series is not an error (a workload may have no outbound traffic).
func CheckAgainst(ctx context.Context, promURL string, fsys fs.FS, vars map[string]string) []error {
	rs, err := Run(ctx, &http.Client{Timeout: 30 * time.Second}, promURL, fsys, vars)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, r := range rs {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Query, r.Err))
		}
	}
	return errs
}

// InstantQuery evaluates expr now through Prometheus's HTTP API and
// returns how many series the result holds.
func InstantQuery(ctx context.Context, c *http.Client, promURL, expr string) (int, error) {
	u := strings.TrimSuffix(promURL, "/") + "/api/v1/query"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("HTTP %d, not a Prometheus API answer: %.200s", resp.StatusCode, body)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s: %s", r.ErrorType, r.Error)
	}
	switch r.Data.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(r.Data.Result, &series); err != nil {
			return 0, err
		}
		return len(series), nil
	case "scalar", "string":
		return 1, nil
	}
	return 0, errors.New("prometheus: unknown result type " + r.Data.ResultType)
}
