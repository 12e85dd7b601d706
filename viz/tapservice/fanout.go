package tapservice

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// DialFunc opens a tap client to the proxy at addr, which must prove id.
type DialFunc func(ctx context.Context, addr netip.AddrPort, id spiffe.ID) (tappb.TapClient, io.Closer, error)

// dialProxy reaches a proxy's tap API over mutual TLS with the tap
// service's identity, accepting only the pod's own identity.
func dialProxy(certs mtls.CertSource) DialFunc {
	return func(_ context.Context, addr netip.AddrPort, id spiffe.ID) (tappb.TapClient, io.Closer, error) {
		cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(mtls.ClientConfig(certs, id))))
		if err != nil {
			return nil, nil, err
		}
		return tappb.NewTapClient(cc), cc, nil
	}
}

// fanOut taps each meshed running pod of ps and writes their events to
// out until ctx ends or the tap's limit is reached.
func (h *Handler) fanOut(ctx context.Context, w http.ResponseWriter, ps []corev1.Pod, req tapapi.Request, dsts, srcs []string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newEventWriter(w, cancel)
	type tapped struct {
		pod  *corev1.Pod
		addr netip.AddrPort
	}
	var targets []tapped
	for i := range ps {
		p := &ps[i]
		a, running := podAddr(p)
		if !meshpod.IsMeshed(p) || !running {
			continue
		}
		port := tapPort(p)
		if port == 0 {
			out.fail(p, "its proxy was injected before tap existed: restart the pod to re-inject it")
			continue
		}
		targets = append(targets, tapped{p, netip.AddrPortFrom(a, uint16(port))})
	}
	if len(targets) > MaxPods {
		out.fail(nil, fmt.Sprintf("%d pods match; tapping the first %d", len(targets), MaxPods))
		targets = targets[:MaxPods]
	}
	if len(targets) == 0 {
		out.fail(nil, "no running meshed pod to tap")
		return
	}
	// One stream per pod, within the service's budget of proxy streams.
	if n := int32(len(targets)); h.streams.Add(n) > MaxProxyStreams {
		h.streams.Add(-n)
		out.fail(nil, fmt.Sprintf("the tap service has %d streams to proxies open (taps of %d pods would pass it): try again later, or tap fewer pods", MaxProxyStreams, len(targets)))
		return
	}
	defer h.streams.Add(-int32(len(targets)))
	obs := observeRequest(req, dsts, srcs, len(targets))
	var left atomic.Int64
	left.Store(int64(req.Limit))
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.tapPod(ctx, out, t.pod, t.addr, obs, &left, cancel); err != nil && ctx.Err() == nil {
				out.fail(t.pod, err.Error())
			}
		}()
	}
	wg.Wait()
}

// observeRequest is what a tap asks of each of its pods' proxies: its
// filter, and its share of the tap's events per second in requests (the
// proxies admit whole requests).
func observeRequest(req tapapi.Request, dsts, srcs []string, pods int) *tappb.ObserveRequest {
	obs := &tappb.ObserveRequest{MaxRps: req.MaxEventRate / tapapi.EventsPerRequest / float64(pods),
		RedactHeaders: req.RedactHeaders, RedactQueryParams: req.RedactQueryParams,
		ShowHeaders: req.ShowHeaders, ShowQueryParams: req.ShowQueryParams,
		Filter: &tappb.Filter{Direction: req.Direction, Method: req.Method, Authority: req.Authority,
			PathPrefix: req.PathPrefix, Route: req.Route, DestinationAddrs: dsts, SourceAddrs: srcs}}
	if req.Limit > 0 {
		obs.Limit = uint32(req.Limit)
	}
	return obs
}

// tapPod streams one pod's events; left counts down the tap's limit
// (when it has one) and cancel ends the whole tap at zero.
func (h *Handler) tapPod(ctx context.Context, out *eventWriter, p *corev1.Pod, addr netip.AddrPort, obs *tappb.ObserveRequest, left *atomic.Int64, cancel func()) error {
	id := spiffe.New(h.o.TrustDomain, p.Namespace, serviceAccount(p))
	client, closer, err := h.o.Dial(ctx, addr, id)
	if err != nil {
		return fmt.Errorf("tap %s: %w", addr, err)
	}
	defer closer.Close()
	stream, err := client.Observe(ctx, obs)
	if err != nil {
		return fmt.Errorf("tap %s: %w", addr, err)
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tap %s: %w", addr, err)
		}
		out.write(h.convert(ctx, p, ev))
		if ev.GetResponseEnd() != nil && obs.Limit > 0 && left.Add(-1) == 0 {
			cancel()
		}
	}
}

func serviceAccount(p *corev1.Pod) string {
	if p.Spec.ServiceAccountName != "" {
		return p.Spec.ServiceAccountName
	}
	return "default"
}

// convert turns a proxy's event into the API's.
func (h *Handler) convert(ctx context.Context, p *corev1.Pod, ev *tappb.TapEvent) tapapi.Event {
	e := tapapi.Event{Time: time.Unix(0, ev.UnixNano).UTC(), Namespace: p.Namespace, Pod: p.Name,
		Direction: ev.Direction, TLS: ev.Tls,
		Source:      h.peers.peer(ctx, ev.Source, ev.SourceIdentity),
		Destination: h.peers.peer(ctx, ev.Destination, ev.DestinationIdentity)}
	if ev.Id != 0 {
		e.ID = p.Name + ":" + strconv.FormatUint(ev.Id, 10)
	}
	switch x := ev.Event.(type) {
	case *tappb.TapEvent_RequestStart:
		rs := x.RequestStart
		e.Type, e.Method, e.Scheme, e.Authority, e.Path, e.Route = tapapi.RequestStart, rs.Method, rs.Scheme, rs.Authority, rs.Path, rs.Route
		for _, hd := range rs.Headers {
			e.Headers = append(e.Headers, tapapi.Header{Name: hd.Name, Value: hd.Value})
		}
	case *tappb.TapEvent_ResponseStart:
		e.Type, e.Status = tapapi.ResponseStart, int(x.ResponseStart.Status)
		e.LatencyMs = float64(x.ResponseStart.SinceRequestNanos) / 1e6
	case *tappb.TapEvent_ResponseEnd:
		end := x.ResponseEnd
		e.Type, e.Status, e.Reason = tapapi.ResponseEnd, int(end.Status), end.Reason
		e.DurationMs, e.ResponseBytes = float64(end.SinceRequestNanos)/1e6, end.ResponseBytes
		if end.HasGrpcStatus {
			g := int(end.GrpcStatus)
			e.GRPCStatus = &g
		}
	case *tappb.TapEvent_Dropped:
		e.Type, e.Count = tapapi.Dropped, x.Dropped.Count
	}
	return e
}

// eventWriter writes events as JSON lines, one writer at a time, flushing
// each so that the caller sees it at once.
type eventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	enc     *json.Encoder
	rc      *http.ResponseController
	failed  bool
	stalled func() // ends the tap: the caller does not read
}

func newEventWriter(w http.ResponseWriter, stalled func()) *eventWriter {
	return &eventWriter{w: w, enc: json.NewEncoder(w), rc: http.NewResponseController(w), stalled: stalled}
}

// writeTimeout is how long the caller may take to read one event; a
// caller that reads nothing for this long (a suspended kubectl) has its
// tap ended, so that it holds no proxy's session.
const writeTimeout = 10 * time.Second

func (o *eventWriter) write(e tapapi.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed {
		return
	}
	_ = o.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	err := o.enc.Encode(e)
	if err == nil {
		err = o.rc.Flush()
	}
	if err != nil {
		o.failed = true
		o.stalled()
	}
}

// fail reports a pod that cannot be tapped (p nil: the tap as a whole).
func (o *eventWriter) fail(p *corev1.Pod, msg string) {
	e := tapapi.Event{Type: tapapi.Error, Time: time.Now().UTC(), Message: msg}
	if p != nil {
		e.Namespace, e.Pod = p.Namespace, p.Name
	}
	o.write(e)
}
