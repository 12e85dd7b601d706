package routes

import (
	"fmt"
	"net/http"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// regexPolicy is 100 routes with one rule each whose path match is a
// realistic regular expression.
func regexPolicy() *pb.OutboundPolicy {
	resources := []string{"users", "orders", "items", "carts", "payments", "invoices", "products",
		"reviews", "sessions", "accounts", "shipments", "coupons", "stores", "vendors", "refunds",
		"tickets", "messages", "events", "reports", "teams", "projects", "tasks", "files", "tags", "notes"}
	templates := []string{
		"/api/v1/%s/[0-9]+",
		"/%s/[a-z0-9-]+/items",
		"/api/v2/%s/[0-9a-f]{8}-[0-9a-f]{4}(/history)?",
		"/internal/%s/(get|list|watch)/[A-Za-z]+",
	}
	p := policy()
	for i := range 100 {
		re := fmt.Sprintf(templates[i%len(templates)], resources[i/len(templates)])
		p.Routes = append(p.Routes, route(fmt.Sprintf("r%02d", i), nil, rule(regex(re))))
	}
	return p
}

func benchMatch(b *testing.B, tb *Table, r *Request, want string) {
	if got := ruleName(tb.Match(r)); got != want {
		b.Fatalf("Match = %q, want %q", got, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tb.Match(r)
	}
}

func BenchmarkMatch100Regex(b *testing.B) {
	tb := mustCompile(b, regexPolicy())
	h := http.Header{"User-Agent": {"bench"}}
	b.Run("last", func(b *testing.B) {
		// The 100th: "/internal/notes/(get|list|watch)/[A-Za-z]+".
		r := &Request{Method: "GET", Authority: "web.ns:80", Target: "/internal/notes/list/Pending?limit=10", Header: h}
		benchMatch(b, tb, r, "r99/0")
	})
	b.Run("none", func(b *testing.B) {
		r := &Request{Method: "GET", Authority: "web.ns:80", Target: "/api/v1/users/12/unknown?x=1", Header: h}
		benchMatch(b, tb, r, "")
	})
	b.Run("none-shared-prefix", func(b *testing.B) {
		// Passes every "/api/v1/" prefix filter up to the resource name.
		r := &Request{Method: "GET", Authority: "web.ns:80", Target: "/api/v1/notes/x", Header: h}
		benchMatch(b, tb, r, "")
	})
}

func BenchmarkMatchDefault(b *testing.B) {
	r := &Request{Method: "GET", Authority: "web.ns:80", Target: "/api/v1/users/12?x=1", Header: http.Header{}}
	benchMatch(b, Default(), r, "http/0")
}

func BenchmarkMatchHostsHeadersQuery(b *testing.B) {
	p := policy(
		route("wild", []string{"*.ns"}, rule(prefix("/"))),
		route("web", []string{"web.ns", "web"}, rule(&pb.RouteMatch{
			Path:    prefix("/api").Path,
			Method:  "GET",
			Headers: []*pb.HeaderMatch{hdr(pb.HeaderMatch_EXACT, "x-canary", "1"), hdr(pb.HeaderMatch_REGEX, "user-agent", "curl/.*")},
			Query:   []*pb.QueryMatch{qry(pb.QueryMatch_EXACT, "v", "2")},
		}), rule(prefix("/api"))),
	)
	r := &Request{Method: "GET", Authority: "Web.NS:8080", Target: "/api/users?page=3&v=2",
		Header: http.Header{"X-Canary": {"1"}, "User-Agent": {"curl/8.5.0"}}}
	benchMatch(b, mustCompile(b, p), r, "web/0")
}

func BenchmarkPickBackend(b *testing.B) {
	r := pickRule(b, 10, 20, 30, 40)
	b.ReportAllocs()
	var x uint64
	for b.Loop() {
		x += 0x9e3779b97f4a7c15
		r.PickBackend(x)
	}
}

func BenchmarkBudgetDeposit(b *testing.B) {
	bu := NewBudget(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		bu.Deposit()
	}
}

func BenchmarkBudgetDepositParallel(b *testing.B) {
	bu := NewBudget(nil, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bu.Deposit()
		}
	})
}

func BenchmarkBudgetWithdraw(b *testing.B) {
	bu := NewBudget(&pb.RetryBudget{Ratio: 1e9, MinPerSecond: 1}, nil)
	bu.Deposit()
	b.ReportAllocs()
	for b.Loop() {
		bu.Withdraw()
	}
}
