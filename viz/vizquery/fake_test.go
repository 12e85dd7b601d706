package vizquery

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeProm is a Prometheus HTTP API that answers queries from a table and
// records what it was asked.
type fakeProm struct {
	mu      sync.Mutex
	answers map[string]any // query → result (a vector or matrix)
	asked   []string
	// errorFor answers this query with a bad_data error.
	errorFor string
}

// vec is a vector result; each sample is labels and a value string.
func vec(samples ...any) any {
	out := []any{}
	for i := 0; i < len(samples); i += 2 {
		out = append(out, map[string]any{"metric": samples[i], "value": []any{1700000000, samples[i+1]}})
	}
	return map[string]any{"resultType": "vector", "result": out}
}

// mat is a matrix result of one stream.
func mat(labels map[string]string, points ...any) any {
	var vs []any
	for i := 0; i < len(points); i += 2 {
		vs = append(vs, []any{points[i], points[i+1]})
	}
	return map[string]any{"resultType": "matrix", "result": []any{map[string]any{"metric": labels, "values": vs}}}
}

type L = map[string]string

func (f *fakeProm) start(t *testing.T) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/status/buildinfo":
			fmt.Fprint(w, `{"status":"success","data":{"version":"3.6.0","revision":"x","branch":"","buildUser":"","buildDate":"","goVersion":"go1.26"}}`)
			return
		case "/api/v1/query", "/api/v1/query_range":
		default:
			http.NotFound(w, r)
			return
		}
		q := r.FormValue("query")
		f.mu.Lock()
		f.asked = append(f.asked, q)
		res, ok := f.answers[q]
		bad := q == f.errorFor
		f.mu.Unlock()
		if bad {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"parse error: unexpected thing"}`)
			return
		}
		if !ok {
			if r.URL.Path == "/api/v1/query" {
				res = vec()
			} else {
				res = map[string]any{"resultType": "matrix", "result": []any{}}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": res})
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = func() time.Time { return time.Unix(1700000000, 0) }
	return c
}

func (f *fakeProm) queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}
