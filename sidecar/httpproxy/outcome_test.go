package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// outcomes records the verdicts the pipeline gives each endpoint.
type outcomes struct {
	mu        sync.Mutex
	got       []string
	connected int              // Connected calls
	refusedBy []netip.AddrPort // ConnectFailed calls, by endpoint
	more      chan struct{}    // signalled by each verdict; see signal
}

// signal returns o.more, made on first use; o.mu is held.
func (o *outcomes) signal() chan struct{} {
	if o.more == nil {
		o.more = make(chan struct{}, 1)
	}
	return o.more
}

type recordingLoad struct {
	o    *outcomes
	addr netip.AddrPort
}

func (l *recordingLoad) Connected() {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	l.o.connected++
}
func (l *recordingLoad) FirstByte() {}
func (l *recordingLoad) ConnectFailed() {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	l.o.refusedBy = append(l.o.refusedBy, l.addr)
}
func (l *recordingLoad) Done(o balance.Outcome) {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	l.o.got = append(l.o.got, fmt.Sprintf("%s=%d", l.addr, o))
	select {
	case l.o.signal() <- struct{}{}:
	default: // take has one to wake on already
	}
}

// take returns the verdicts so far once there are n (the last is given
// after the response reached the client), or after a second.
func (o *outcomes) take(n int) []string {
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.got) < n {
		more := o.signal()
		o.mu.Unlock()
		select {
		case <-more:
			o.mu.Lock()
		case <-deadline.C:
			o.mu.Lock()
			n = 0 // what there is
		}
	}
	got := o.got
	o.got = nil
	return got
}

// Each attempt's endpoint is told how it did, for failure accrual: a
// failure status or a refused connection is a failure, any other answer
// a success; an endpoint that refused is judged before the re-send goes
// elsewhere, and told that it refused (ConnectFailed: the balancer passes
// it over). Both engines.
func TestOutcomeReportedPerAttempt(t *testing.T) {
	fails := rtServe(t, "bad", func(w http.ResponseWriter, r *http.Request, n int) bool {
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	good := rtServe(t, "good", nil)
	ln := rtListen(t)
	gone := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	rec := &outcomes{}
	pol := rtPolicy(rtRoute("web", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}}))
	var e *rtEnv
	var order []netip.AddrPort
	var next int
	var mu sync.Mutex
	e = newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, nil, func(o *Options) {
		o.Balance = func(_ context.Context, _ netip.AddrPort, _ *routes.Backend) (Endpoint, error) {
			mu.Lock()
			defer mu.Unlock()
			a := order[next%len(order)]
			next++
			return Endpoint{Addr: a, Load: &recordingLoad{o: rec, addr: a}}, nil
		}
	})
	success, failure := int(balance.OutcomeSuccess), int(balance.OutcomeFailure)
	for _, en := range e.engines(t) {
		for _, c := range []struct {
			name    string
			order   []netip.AddrPort
			status  int
			want    []string
			refused []netip.AddrPort
		}{
			{"200", []netip.AddrPort{good.addr}, 200, []string{fmt.Sprintf("%s=%d", good.addr, success)}, nil},
			{"500", []netip.AddrPort{fails.addr}, 500, []string{fmt.Sprintf("%s=%d", fails.addr, failure)}, nil},
			{"refused, then re-sent", []netip.AddrPort{gone, good.addr}, 200,
				[]string{fmt.Sprintf("%s=%d", gone, failure), fmt.Sprintf("%s=%d", good.addr, success)}, []netip.AddrPort{gone}},
		} {
			mu.Lock()
			order, next = c.order, 0
			mu.Unlock()
			res, _ := en.do(t, "GET", "/", nil)
			if res.StatusCode != c.status {
				t.Errorf("%s %s: status %d, want %d", en.name, c.name, res.StatusCode, c.status)
			}
			if got := rec.take(len(c.want)); !slices.Equal(got, c.want) {
				t.Errorf("%s %s: outcomes %v, want %v", en.name, c.name, got, c.want)
			}
			rec.mu.Lock()
			if !slices.Equal(rec.refusedBy, c.refused) {
				t.Errorf("%s %s: ConnectFailed for %v, want %v", en.name, c.name, rec.refusedBy, c.refused)
			}
			rec.refusedBy = nil
			rec.mu.Unlock()
		}
	}
}

// ConnectFailed is the endpoint's fault alone: refused, or not accepted
// within the connect timeout; not a handshake that failed on a connection
// it accepted, not a dial the request gave up first, not a destination
// the proxy could not dial at all, not the proxy's own lack of sockets.
func TestConnectFailedOnlyForTheEndpointsFault(t *testing.T) {
	hang := func(ctx context.Context, _ netip.AddrPort) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	refuse := func(context.Context, netip.AddrPort) (net.Conn, error) { return nil, syscall.ECONNREFUSED }
	tooManyFiles := func(context.Context, netip.AddrPort) (net.Conn, error) { return nil, syscall.EMFILE }
	pipe := func(context.Context, netip.AddrPort) (net.Conn, error) {
		c, s := net.Pipe()
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, nil
	}
	badHandshake := func(context.Context, net.Conn, spiffe.ID) (net.Conn, error) {
		return nil, errors.New("certificate names someone else")
	}
	gone, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	id := spiffe.ID{TrustDomain: "example.org", Namespace: "a", ServiceAccount: "b"}
	for _, c := range []struct {
		name string
		dial func(context.Context, netip.AddrPort) (net.Conn, error)
		ctx  context.Context
		addr string
		id   spiffe.ID
		want bool
	}{
		{"refused", refuse, context.Background(), "127.0.0.1:1", spiffe.ID{}, true},
		{"not accepted within the connect timeout", hang, context.Background(), "127.0.0.1:1", spiffe.ID{}, true},
		{"the request gave up first", hang, gone, "127.0.0.1:1", spiffe.ID{}, false},
		{"the handshake failed", pipe, context.Background(), "127.0.0.1:1", id, false},
		{"no address to dial", refuse, context.Background(), "web:80", spiffe.ID{}, false},
		{"the proxy is out of file descriptors", tooManyFiles, context.Background(), "127.0.0.1:1", spiffe.ID{}, false},
	} {
		p := &Proxy{opts: Options{Dial: c.dial, ConnectTimeout: 200 * time.Millisecond, Secure: badHandshake}}
		_, err := p.connect(c.ctx, c.addr, c.id, netip.AddrPort{})
		if err == nil {
			t.Fatalf("%s: connected", c.name)
		}
		rec := &outcomes{}
		Endpoint{Load: &recordingLoad{o: rec}}.connectFailed(err)
		if got := len(rec.refusedBy) == 1; got != c.want {
			t.Errorf("%s (%v): ConnectFailed called: %v, want %v", c.name, err, got, c.want)
		}
	}
}

func TestEndpointFault(t *testing.T) {
	for reason, want := range map[string]bool{
		ReasonConnectRefused: true, ReasonUpstreamReset: true, ReasonTLS: true, ReasonTimeout: true,
		ReasonClientGone: false, ReasonClientReset: false, ReasonNoEndpoints: false, ReasonQueueFull: false,
		ReasonNoRoute: false, ReasonRouteTimeout: false, ReasonBadRequest: false, "": false,
	} {
		if got := endpointFault(reason); got != want {
			t.Errorf("endpointFault(%q) = %v, want %v", reason, got, want)
		}
	}
}

// A request that waits for a new connection tells its endpoint's Load
// once the connection is up, so that the balancer's latency sample leaves
// the handshake out; one on a pooled connection does not. Both engines.
func TestConnectedOnlyForNewConnections(t *testing.T) {
	srv := rtServe(t, "srv", nil)
	rec := &outcomes{}
	pol := rtPolicy(rtRoute("web", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, nil, func(o *Options) {
		o.Balance = func(_ context.Context, _ netip.AddrPort, _ *routes.Backend) (Endpoint, error) {
			return Endpoint{Addr: srv.addr, Load: &recordingLoad{o: rec, addr: srv.addr}}, nil
		}
	})
	for _, en := range e.engines(t) {
		e.p.CloseIdle()
		connected := func() int {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			n := rec.connected
			rec.connected = 0
			return n
		}
		connected()
		for i, want := range []int{1, 0, 0} {
			if res, _ := en.do(t, "GET", "/", nil); res.StatusCode != 200 {
				t.Fatalf("%s request %d: status %d", en.name, i, res.StatusCode)
			}
			rec.take(1)
			if got := connected(); got != want {
				t.Errorf("%s request %d: Connected called %d times, want %d (a new connection only for the first)", en.name, i, got, want)
			}
		}
	}
}
