package proxy

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
	"github.com/plexus-mesh/plexus/testsupport/netnstest"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// BenchmarkMeshHTTP1 measures sequential HTTP/1.1 keep-alive requests
// (1 KiB response) from the client namespace to the server namespace:
// direct, through both proxies in plaintext, and through both proxies
// with discovery and mTLS between them. It reports p50/p99
// latency and, with proxies, each proxy's RSS after the run.
func BenchmarkMeshHTTP1(b *testing.B) {
	for _, v := range []struct {
		name    string
		proxied bool
		env     []string
	}{
		{"direct", false, nil},
		{"proxied-http", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info"}},
		{"proxied-http-gomaxprocs1", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info", "GOMAXPROCS=1"}},
		{"proxied-opaque", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info", "PLEXUS_PROXY_OPAQUE_PORTS=8080"}},
		{"proxied-mtls", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info"}},
		// The tap: off (no tap server), on but no one taps (proxied-mtls),
		// and a tapper reading every request's events.
		{"proxied-mtls-notap", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info", "PLEXUS_PROXY_TAP_PORT=off"}},
		{"proxied-mtls-tapped", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info"}},
		{"proxied-mtls-authz", true, []string{"PLEXUS_PROXY_LOG_LEVEL=info"}},
		{"socat-pair", false, nil},
	} {
		proxied := v.proxied
		b.Run(v.name, func(b *testing.B) {
			var m *mesh
			var ca *testpki.CA
			switch v.name {
			case "proxied-mtls", "proxied-mtls-notap", "proxied-mtls-tapped", "proxied-mtls-authz":
				var dest *fakedestination.Server
				if v.name == "proxied-mtls-authz" {
					m, dest = newAuthzMesh(b, v.env)
				} else {
					m, dest, ca = newMTLSMeshCA(b, v.env)
				}
				tgt := fmt.Sprintf("%s:8080", serverIP)
				dest.Set(tgt, fakedestination.Add(fakedestination.Endpoint(tgt, serverPodID)))
			default:
				m = newTopology(b, proxied, v.env...)
			}
			if v.name == "socat-pair" {
				// A peer TCP relay pair under the same rules: the cost of two
				// extra user-space hops on this machine.
				socat(b, m.client, "4140", "")
				socat(b, m.server, "4143", ",bind=127.0.0.6") // as the inbound proxy dials, or the self-call rule loops it
			}
			body := strings.Repeat("x", 1024)
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
			go srv.Serve(m.server.listen(b, ":8080"))
			defer srv.Close()
			c := m.client.httpClient(false)
			url := fmt.Sprintf("http://%s:8080/", serverIP)
			get := func() {
				res, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			for range 200 { // warm up pools
				get()
			}
			if v.name == "proxied-mtls-tapped" {
				stream := openTap(b, m.server, ca, &tappb.ObserveRequest{MaxRps: 1e9})
				go func() {
					for {
						if _, err := stream.Recv(); err != nil {
							return
						}
					}
				}()
			}
			mallocs0 := proxyMallocs(b, m, proxied)
			lat := make([]time.Duration, 0, b.N)
			var cpu0 time.Duration
			if proxied {
				cpu0 = cpuTime(b, m.client.cmd.Process.Pid) + cpuTime(b, m.server.cmd.Process.Pid)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				get()
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if v.name == "proxied-mtls" {
				// The numbers are only worth something if mTLS carried the requests.
				if got := sumSamples(m.server.scrapeTB(b), "request_total", map[string]string{"tls": "true", "client_id": clientPodID.String()}); got < float64(b.N) {
					b.Fatalf("server proxy saw %v mTLS requests, want ≥ %d", got, b.N)
				}
			}
			if proxied {
				cpu := cpuTime(b, m.client.cmd.Process.Pid) + cpuTime(b, m.server.cmd.Process.Pid) - cpu0
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "pair-cpu-µs/req")
				b.ReportMetric((proxyMallocs(b, m, proxied)-mallocs0)/float64(b.N), "pair-mallocs/req")
				b.ReportMetric(rssMB(b, m.client.cmd.Process.Pid), "client-proxy-RSS-MB")
				b.ReportMetric(rssMB(b, m.server.cmd.Process.Pid), "server-proxy-RSS-MB")
			}
		})
	}
}

// proxyMallocs is the heap allocations both proxies have made (their
// go_memstats_mallocs_total), 0 without proxies.
func proxyMallocs(b *testing.B, m *mesh, proxied bool) float64 {
	if !proxied {
		return 0
	}
	return sumSamples(m.client.scrapeTB(b), "go_memstats_mallocs_total", nil) + sumSamples(m.server.scrapeTB(b), "go_memstats_mallocs_total", nil)
}

// socat runs a fixed-destination TCP relay as UID 2102 in the pod, with
// the mesh rules installed, listening on port; opts are added to its
// connect address.
func socat(b *testing.B, p *pod, port, opts string) {
	if _, err := exec.LookPath("socat"); err != nil {
		b.Skip("socat not installed")
	}
	p.ns.Restore(b, false, netnstest.MeshRules(b, false, 4143, 4140, 4191, proxyUID))
	cmd := p.ns.Command("setpriv", "--reuid=2102", "--regid=2102", "--clear-groups",
		"socat", "TCP-LISTEN:"+port+",fork,reuseaddr", "TCP:"+serverIP+":8080,nodelay"+opts)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(b, "socat listening", func() bool {
		out, _ := p.ns.Command("ss", "-Hltn", "sport = :"+port).Output()
		return strings.Contains(string(out), port)
	})
}

// cpuTime is the user+system CPU time process pid has used (in clock
// ticks of 10 ms, so measure over many requests).
func cpuTime(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func rssMB(b testing.TB, pid int) float64 { return procStatusMB(b, pid, "VmRSS:") }

// procStatusMB reads a field of /proc/PID/status in kB (VmRSS:, VmHWM:)
// as MB.
func procStatusMB(b testing.TB, pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// newAuthzMesh is newMTLSMesh whose server proxy also enforces inbound
// policies: it asks a destination of its own (in its namespace) for them
// and gets all-unauthenticated, the default, on every port.
func newAuthzMesh(b *testing.B, env []string) (*mesh, *fakedestination.Server) {
	b.Helper()
	m := newTopology(b, false)
	ca := testpki.New("mesh")
	destID := spiffe.New("cluster.local", "plexus-system", "plexus-destination")
	dest := fakedestination.Serve(m.client.listen(b, "127.0.0.1:8086"), ca, destID)
	b.Cleanup(dest.Stop)
	policies := fakedestination.Serve(m.server.listen(b, "127.0.0.1:8086"), ca, destID)
	b.Cleanup(policies.Stop)
	all := &pb.InboundPolicy{Server: &pb.ResourceRef{Kind: "default", Name: "all-unauthenticated"},
		Authorizations: []*pb.Authorization{{Ref: &pb.ResourceRef{Kind: "default", Name: "all-unauthenticated"}}}}
	for _, port := range []uint32{8080, 4191} {
		policies.SetInbound(port, all)
	}
	m.server = startProxy(b, m.server.ns, identityEnv(ca, serverPodID, append(env,
		"PLEXUS_PROXY_DESTINATION_ADDR=127.0.0.1:8086", "PLEXUS_PROXY_POD_NAME=server", "PLEXUS_PROXY_INBOUND_PORTS=8080")...)...)
	m.client = startProxy(b, m.client.ns, identityEnv(ca, clientPodID, append(env, "PLEXUS_PROXY_DESTINATION_ADDR=127.0.0.1:8086")...)...)
	return m, dest
}
