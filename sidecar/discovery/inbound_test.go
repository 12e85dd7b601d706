package discovery

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
)

func TestInboundPolicies(t *testing.T) {
	changed := make(chan uint16, 8)
	logs := &logRecorder{}
	e := newEnv(t, func(o *Options) {
		o.Log = slog.New(logs)
		o.PodNamespace, o.PodName = "shop", "web-1"
		o.FirstTimeout = 200 * time.Millisecond
		o.InboundChanged = func(port uint16, _ *authz.Policy) { changed <- port }
	})
	e.srv.InboundRequests = make(chan *destinationpb.InboundPolicyRequest, 8)
	allowAll := &destinationpb.InboundPolicy{Server: &destinationpb.ResourceRef{Kind: "default", Name: "all-unauthenticated"},
		Authorizations: []*destinationpb.Authorization{{Ref: &destinationpb.ResourceRef{Kind: "default", Name: "all-unauthenticated"}}}}
	e.srv.SetInbound(8080, allowAll)
	e.r.WatchInbound([]uint16{8080, 9090})
	select {
	case req := <-e.srv.InboundRequests:
		if req.GetNamespace() != "shop" || req.GetPod() != "web-1" || (req.GetPort() != 8080 && req.GetPort() != 9090) {
			t.Errorf("request = %v, want the proxy's own pod", req)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no GetInboundPolicy stream")
	}
	ctx := context.Background()
	p := e.r.InboundPolicy(ctx, 8080)
	if p == nil || p.Server.GetName() != "all-unauthenticated" {
		t.Fatalf("policy of 8080 = %+v", p)
	}
	// 9090 never had a policy: none, and /ready says so.
	if p := e.r.InboundPolicy(ctx, 9090); p != nil {
		t.Errorf("policy of 9090 = %+v, want none (fail closed)", p)
	}
	if err := e.r.InboundReady(); err == nil || !strings.Contains(err.Error(), "9090") || strings.Contains(err.Error(), "8080") {
		t.Errorf("InboundReady = %v, want it to name port 9090 only", err)
	}
	deny := &destinationpb.InboundPolicy{Server: &destinationpb.ResourceRef{Kind: "default", Name: "deny"}}
	e.srv.SetInbound(9090, deny)
	within(t, time.Second, "9090's policy arrives", func() bool { return e.r.InboundReady() == nil })
	// A port a client tried (not declared) does not hold /ready back.
	if p := e.r.InboundPolicy(ctx, 7777); p != nil {
		t.Errorf("policy of 7777 = %+v, want none", p)
	}
	if err := e.r.InboundReady(); err != nil {
		t.Errorf("after a stray port: InboundReady = %v, want nil", err)
	}
	// A change reaches the proxy and is announced.
	drain(changed)
	e.srv.SetInbound(8080, deny)
	select {
	case port := <-changed:
		if port != 8080 {
			t.Errorf("changed port %d, want 8080", port)
		}
	case <-time.After(time.Second):
		t.Fatal("the change was not announced")
	}
	if p := e.r.InboundPolicy(ctx, 8080); p.Server.GetName() != "deny" {
		t.Errorf("after the change: %s", p.Server.GetName())
	}
	// The control plane goes away: the last policy stays.
	e.srv.Stop()
	within(t, 2*time.Second, "the end of 8080's stream noticed", func() bool {
		return logs.has("inbound policy stream ended", "port=8080")
	})
	if p := e.r.InboundPolicy(ctx, 8080); p == nil || p.Server.GetName() != "deny" {
		t.Errorf("with destination gone: %+v, want the last policy", p)
	}
}

func drain(c chan uint16) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
