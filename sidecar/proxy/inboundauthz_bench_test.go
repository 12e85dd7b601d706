package proxy

import (
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/policy/authz"
)

// BenchmarkInboundAuthorization is a closed loop of HTTP/1.1 keep-alive
// requests through an inbound proxy to an app on loopback, without
// inbound policies and with the default all-unauthenticated one: the cost
// of authorizing every request, measured against its baseline in the
// same run.
func BenchmarkInboundAuthorization(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "policies=off"
		if on {
			name = "policies=all-unauthenticated"
		}
		b.Run(name, func(b *testing.B) {
			app := serveLoopback(b, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })})
			appAddr := netip.MustParseAddrPort(app)
			pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
			_, inAddr := serveInboundTB(b, prometheus.NewRegistry(), appAddr, func(o *Options) {
				if on {
					o.Inbound = pols
				}
			})
			pols.set(b, appAddr.Port(), policyOf("all-unauthenticated", allUnauthenticated))
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			url := "http://" + inAddr.String() + "/"
			b.ReportAllocs()
			for b.Loop() {
				res, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
		})
	}
}
