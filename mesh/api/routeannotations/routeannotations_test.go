package routeannotations

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func p[T any](v T) *T { return &v }

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]string
		want Settings
	}{
		{"none", nil, Settings{}},
		{"other annotations ignored", map[string]string{"balancer.plexus.dev/failure-accrual": "consecutive"}, Settings{}},
		{"http list with spaces", map[string]string{RetryHTTP: " 5xx , gateway-error,429, 500-504 "},
			Settings{HTTPStatuses: []StatusRange{{500, 599}, {502, 504}, {429, 429}, {500, 504}}}},
		{"http range with spaces", map[string]string{RetryHTTP: "500 - 503"}, Settings{HTTPStatuses: []StatusRange{{500, 503}}}},
		{"http upper case", map[string]string{RetryHTTP: "5XX,Gateway-Error"}, Settings{HTTPStatuses: []StatusRange{{500, 599}, {502, 504}}}},
		{"grpc every name", map[string]string{RetryGRPC: "cancelled, deadline-exceeded,internal,resource-exhausted ,unavailable"},
			Settings{GRPCCodes: []uint32{1, 4, 13, 8, 14}}},
		{"limit", map[string]string{RetryLimit: "3"}, Settings{Limit: p[uint32](3)}},
		{"limit zero", map[string]string{RetryLimit: "0"}, Settings{Limit: p[uint32](0)}},
		{"attempt timeout", map[string]string{RetryTimeout: "250ms"}, Settings{AttemptTimeout: p(250 * time.Millisecond)}},
		{"budget", map[string]string{RetryBudget: "0.5, 20, 30s"}, Settings{Budget: &Budget{0.5, 20, 30 * time.Second}}},
		{"budget bounds", map[string]string{RetryBudget: "1000,0,1m"}, Settings{Budget: &Budget{1000, 0, time.Minute}}},
		{"timeouts", map[string]string{TimeoutRequest: "10s", TimeoutResponse: " 2s", TimeoutIdle: "1m"},
			Settings{RequestTimeout: p(10 * time.Second), ResponseTimeout: p(2 * time.Second), IdleTimeout: p(time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// TestParseMalformed: every malformed value is reported with the
// annotation and the value, and leaves that annotation unset.
func TestParseMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{RetryHTTP, "", `retry.plexus.dev/http: "" is not a comma-separated list (an item is empty)`},
		{RetryHTTP, "5xx,,503", `retry.plexus.dev/http: "5xx,,503" is not a comma-separated list (an item is empty)`},
		{RetryHTTP, "5xx, foo", `retry.plexus.dev/http: "5xx, foo" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "foo"`},
		{RetryHTTP, "4xx", `retry.plexus.dev/http: "4xx" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "4xx"`},
		{RetryHTTP, "600", `retry.plexus.dev/http: "600" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "600"`},
		{RetryHTTP, "99", `retry.plexus.dev/http: "99" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "99"`},
		{RetryHTTP, "0503", `retry.plexus.dev/http: "0503" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "0503"`},
		{RetryHTTP, "504-500", `retry.plexus.dev/http: "504-500" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "504-500"`},
		{RetryHTTP, "500-", `retry.plexus.dev/http: "500-" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "500-"`},
		{RetryHTTP, "500-502-504", `retry.plexus.dev/http: "500-502-504" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "500-502-504"`},
		{RetryHTTP, "+500", `retry.plexus.dev/http: "+500" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "+500"`},
		{RetryGRPC, "unavailable,not-found", `retry.plexus.dev/grpc: "unavailable,not-found" is not a list of cancelled, deadline-exceeded, internal, resource-exhausted or unavailable: "not-found"`},
		{RetryGRPC, "14", `retry.plexus.dev/grpc: "14" is not a list of cancelled, deadline-exceeded, internal, resource-exhausted or unavailable: "14"`},
		{RetryGRPC, " ", `retry.plexus.dev/grpc: " " is not a comma-separated list (an item is empty)`},
		{RetryLimit, "three", `retry.plexus.dev/limit: "three" is not a non-negative integer`},
		{RetryLimit, "-1", `retry.plexus.dev/limit: "-1" is not a non-negative integer`},
		{RetryLimit, "1.5", `retry.plexus.dev/limit: "1.5" is not a non-negative integer`},
		{RetryLimit, "4294967296", `retry.plexus.dev/limit: "4294967296" is not a non-negative integer`},
		{RetryLimit, "", `retry.plexus.dev/limit: "" is not a non-negative integer`},
		{RetryTimeout, "0s", `retry.plexus.dev/timeout: "0s" is not a positive duration (like 500ms or 10s)`},
		{RetryTimeout, "-1s", `retry.plexus.dev/timeout: "-1s" is not a positive duration (like 500ms or 10s)`},
		{RetryTimeout, "10", `retry.plexus.dev/timeout: "10" is not a positive duration (like 500ms or 10s)`},
		{TimeoutRequest, "soon", `timeout.plexus.dev/request: "soon" is not a positive duration (like 500ms or 10s)`},
		{TimeoutResponse, "0", `timeout.plexus.dev/response: "0" is not a positive duration (like 500ms or 10s)`},
		{TimeoutIdle, "", `timeout.plexus.dev/idle: "" is not a positive duration (like 500ms or 10s)`},
		{RetryBudget, "0.2,10", `retry.plexus.dev/budget: "0.2,10" is not ratio,min-per-second,ttl (like 0.2,10,10s)`},
		{RetryBudget, "0.2,10,10s,1", `retry.plexus.dev/budget: "0.2,10,10s,1" is not ratio,min-per-second,ttl (like 0.2,10,10s)`},
		{RetryBudget, "-0.1,10,10s", `retry.plexus.dev/budget: "-0.1,10,10s" is not ratio,min-per-second,ttl: ratio "-0.1" is not a number from 0 to 1000`},
		{RetryBudget, "1001,10,10s", `retry.plexus.dev/budget: "1001,10,10s" is not ratio,min-per-second,ttl: ratio "1001" is not a number from 0 to 1000`},
		{RetryBudget, "NaN,10,10s", `retry.plexus.dev/budget: "NaN,10,10s" is not ratio,min-per-second,ttl: ratio "NaN" is not a number from 0 to 1000`},
		{RetryBudget, "0.2,-1,10s", `retry.plexus.dev/budget: "0.2,-1,10s" is not ratio,min-per-second,ttl: min-per-second "-1" is not a non-negative integer`},
		{RetryBudget, "0.2,10,500ms", `retry.plexus.dev/budget: "0.2,10,500ms" is not ratio,min-per-second,ttl: ttl "500ms" is not a duration from 1s to 1m0s`},
		{RetryBudget, "0.2,10,61s", `retry.plexus.dev/budget: "0.2,10,61s" is not ratio,min-per-second,ttl: ttl "61s" is not a duration from 1s to 1m0s`},
		{RetryBudget, "x,y,z", `retry.plexus.dev/budget: "x,y,z" is not ratio,min-per-second,ttl: ratio "x" is not a number from 0 to 1000; min-per-second "y" is not a non-negative integer; ttl "z" is not a duration from 1s to 1m0s`},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			got, err := Parse(map[string]string{tc.name: tc.value})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
			if !reflect.DeepEqual(got, Settings{}) {
				t.Errorf("a malformed %s was kept: %+v", tc.name, got)
			}
		})
	}
}

// TestParseKeepsValid: the malformed annotations are dropped and reported
// together; the valid ones are kept.
func TestParseKeepsValid(t *testing.T) {
	got, err := Parse(map[string]string{
		RetryHTTP:      "5xx",
		RetryLimit:     "three",
		RetryBudget:    "0.1,5,5s",
		TimeoutRequest: "forever",
		TimeoutIdle:    "30s",
	})
	want := Settings{HTTPStatuses: []StatusRange{{500, 599}}, Budget: &Budget{0.1, 5, 5 * time.Second}, IdleTimeout: p(30 * time.Second)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	wantErr := `retry.plexus.dev/limit: "three" is not a non-negative integer` + "\n" +
		`timeout.plexus.dev/request: "forever" is not a positive duration (like 500ms or 10s)`
	if err == nil || err.Error() != wantErr {
		t.Errorf("error\n got %v\nwant %s", err, wantErr)
	}
}

func TestMerge(t *testing.T) {
	service, _ := Parse(map[string]string{RetryHTTP: "5xx", RetryLimit: "3", TimeoutRequest: "10s", TimeoutIdle: "1m"})
	route, _ := Parse(map[string]string{RetryHTTP: "503", TimeoutRequest: "2s", RetryGRPC: "unavailable"})
	got := Merge(service, route)
	want := Settings{
		HTTPStatuses:   []StatusRange{{503, 503}},
		GRPCCodes:      []uint32{14},
		Limit:          p[uint32](3),
		RequestTimeout: p(2 * time.Second),
		IdleTimeout:    p(time.Minute),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Merge = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(Merge(service, Settings{}), service) || !reflect.DeepEqual(Merge(Settings{}, route), route) {
		t.Error("merging with nothing changed something")
	}
	// A route turns the Service's retries off with limit 0.
	off, _ := Parse(map[string]string{RetryLimit: "0"})
	if Merge(service, off).Retries() {
		t.Error("limit 0 on the route left retries on")
	}
}

func TestDefaults(t *testing.T) {
	var s Settings
	if s.Retries() || s.EffectiveLimit() != 1 || s.EffectiveBudget() != DefaultBudget {
		t.Errorf("zero Settings: retries %v limit %d budget %+v", s.Retries(), s.EffectiveLimit(), s.EffectiveBudget())
	}
	s, _ = Parse(map[string]string{RetryGRPC: "internal"})
	if !s.Retries() || s.EffectiveLimit() != 1 {
		t.Errorf("a gRPC condition alone: retries %v limit %d", s.Retries(), s.EffectiveLimit())
	}
	s, _ = Parse(map[string]string{RetryLimit: "5", RetryTimeout: "1s"})
	if s.Retries() {
		t.Error("a limit without a condition turned retries on")
	}
}

// TestStandardLibraryOnly keeps the contract importable from anywhere,
// the proxy and the CNI plugin included.
func TestStandardLibraryOnly(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if deps := strings.Fields(string(out)); len(deps) != 1 || !strings.HasSuffix(deps[0], "/mesh/api/routeannotations") {
		t.Errorf("routeannotations links more than the standard library: %v", deps)
	}
}
