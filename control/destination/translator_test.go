package destination

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

func ep(addr string, labels ...string) endpoint {
	e := endpoint{addr: netip.MustParseAddrPort(addr), labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		e.labels[labels[i]] = labels[i+1]
	}
	return e
}

func snap(exists bool, eps ...endpoint) *snapshot {
	s := &snapshot{exists: exists, setLabels: map[string]string{"namespace": "ns", "service": "web"}, endpoints: map[netip.AddrPort]endpoint{}}
	for _, e := range eps {
		s.endpoints[e.addr] = e
	}
	return s
}

// describe renders updates compactly: "add[10.0.0.1:80 ...] remove[...] none(exists)".
func describe(us ...*pb.Update) []string {
	var out []string
	for _, u := range us {
		switch x := u.Update.(type) {
		case *pb.Update_Add:
			out = append(out, "add"+addrList(x.Add))
		case *pb.Update_Remove:
			out = append(out, "remove"+addrList(x.Remove))
		case *pb.Update_NoEndpoints:
			if x.NoEndpoints.Exists {
				out = append(out, "none(exists)")
			} else {
				out = append(out, "none(unknown)")
			}
		}
	}
	return out
}

func addrList(set *pb.AddrSet) string {
	s := "["
	for i, a := range set.Addrs {
		if i > 0 {
			s += " "
		}
		ip, _ := netip.AddrFromSlice(a.Addr.Ip)
		s += netip.AddrPortFrom(ip, uint16(a.Addr.Port)).String()
	}
	return s + "]"
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInitialUpdates(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *snapshot
		want []string
	}{
		{"endpoints", snap(true, ep("10.0.0.2:80"), ep("10.0.0.1:80")), []string{"add[10.0.0.1:80 10.0.0.2:80]"}},
		{"service without endpoints", snap(true), []string{"none(exists)"}},
		{"unknown", snap(false), []string{"none(unknown)"}},
	} {
		if got := describe(initialUpdates(tc.s)...); !equalStrings(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDiffUpdatesOrdering(t *testing.T) {
	a, b, c := ep("10.0.0.1:80"), ep("10.0.0.2:80"), ep("[fd00::3]:80")
	bChanged := ep("10.0.0.2:80", "pod", "b-2")
	for _, tc := range []struct {
		name     string
		old, cur *snapshot
		want     []string
	}{
		{"no change", snap(true, a, b), snap(true, a, b), nil},
		{"one added", snap(true, a), snap(true, a, b), []string{"add[10.0.0.2:80]"}},
		{"remove before add; changed endpoint re-added", snap(true, a, b), snap(true, bChanged, c),
			[]string{"remove[10.0.0.1:80]", "add[10.0.0.2:80 [fd00::3]:80]"}},
		{"last endpoint gone", snap(true, a), snap(true), []string{"remove[10.0.0.1:80]", "none(exists)"}},
		{"service deleted", snap(true, a, b), snap(false), []string{"remove[10.0.0.1:80 10.0.0.2:80]", "none(unknown)"}},
		{"service created without endpoints", snap(false), snap(true), []string{"none(exists)"}},
		{"service created with endpoints", snap(false), snap(true, a), []string{"add[10.0.0.1:80]"}},
		{"still unknown", snap(false), snap(false), nil},
	} {
		if got := describe(diffUpdates(tc.old, tc.cur)...); !equalStrings(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAddCarriesIdentityHintAndLabels(t *testing.T) {
	e := ep("10.0.0.1:8080", "pod", "web-1", "serviceaccount", "web")
	e.identity = "spiffe://cluster.local/ns/ns/sa/web"
	e.opaque = true
	plain := ep("10.0.0.2:8080")
	u := addUpdate(map[string]string{"namespace": "ns", "service": "web"}, []endpoint{e, plain})
	want := `add:{addrs:{addr:{ip:"\n\x00\x00\x01" port:8080} weight:10000 metric_labels:{key:"pod" value:"web-1"} metric_labels:{key:"serviceaccount" value:"web"} tls_identity:{spiffe_id:"spiffe://cluster.local/ns/ns/sa/web"} protocol_hint:{protocol:OPAQUE}} addrs:{addr:{ip:"\n\x00\x00\x02" port:8080} weight:10000 protocol_hint:{}} metric_labels:{key:"namespace" value:"ns"} metric_labels:{key:"service" value:"web"}}`
	got := prototext.MarshalOptions{}.Format(u)
	if normalizeSpace(got) != normalizeSpace(want) {
		t.Errorf("Add =\n%s\nwant\n%s", got, want)
	}
}

func normalizeSpace(s string) string {
	out := []rune{}
	space := false
	for _, r := range s {
		if r == ' ' || r == '\n' || r == '\t' {
			space = true
			continue
		}
		if space && len(out) > 0 {
			out = append(out, ' ')
		}
		space = false
		out = append(out, r)
	}
	return string(out)
}

func TestTranslatorOverflowEndsStreamAndCounts(t *testing.T) {
	overflows, queued := 0, 0
	tr := newTranslator(2, func(*pb.Update) { queued++ }, func() { overflows++ })
	tr.push(noEndpoints(true), noEndpoints(false))
	if overflows != 0 || queued != 2 {
		t.Fatalf("after 2 pushes into a queue of 2: overflows %d queued %d", overflows, queued)
	}
	tr.push(noEndpoints(true))
	tr.push(noEndpoints(true)) // counted once only
	if overflows != 1 || queued != 2 {
		t.Fatalf("after overflow: overflows %d (want 1) queued %d (want 2)", overflows, queued)
	}
	sent := 0
	err := tr.pump(context.Background(), func(*pb.Update) error { sent++; return nil })
	if !errors.Is(err, ErrOverflow) {
		t.Fatalf("pump after overflow = %v, want ErrOverflow", err)
	}
	if sent != 0 {
		t.Errorf("pump sent %d stale updates after the overflow", sent)
	}
	if code := status.Code(grpcError(err)); code != codes.ResourceExhausted {
		t.Errorf("overflow maps to %v, want ResourceExhausted", code)
	}
}

func TestTranslatorPumpSendsInOrderUntilCancelled(t *testing.T) {
	tr := newTranslator(10, func(*pb.Update) {}, func() {})
	tr.push(noEndpoints(false), noEndpoints(true))
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	err := tr.pump(ctx, func(u *pb.Update) error {
		got = append(got, describe(u)...)
		if len(got) == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || !equalStrings(got, []string{"none(unknown)", "none(exists)"}) {
		t.Errorf("pump = %v, sent %v", err, got)
	}
}

// A reader that never reads overflows; the publisher does not wait for it,
// and a fast reader of the same publisher gets every diff in order.
func TestPublisherSlowReaderNeverBlocksOthers(t *testing.T) {
	n := 0
	p := newPublisher(func() snapshot {
		n++
		return *snap(true, ep(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}), 80).String()))
	})
	slowOverflows := 0
	slow := newTranslator(4, func(*pb.Update) {}, func() { slowOverflows++ })
	fast := newTranslator(4, func(*pb.Update) {}, func() { t.Error("the fast reader overflowed") })
	p.subscribeGet(slow)
	p.subscribeGet(fast)

	const updates = 200
	received := make(chan []string, 1)
	go func() {
		var got []string
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_ = fast.pump(ctx, func(u *pb.Update) error {
			got = append(got, describe(u)...)
			if len(got) == 1+2*updates {
				cancel()
			}
			return nil
		})
		received <- got
	}()
	start := time.Now()
	for range updates {
		p.update()
		// Let the fast reader keep up: its queue holds 4 messages and
		// each update is two (remove, add).
		// Not a failure when it does not (the checks below tell).
		eventually.Holds(5*time.Second, func() bool { return len(fast.ch) <= 2 })
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%d updates took %v", updates, d)
	}
	got := <-received
	if len(got) != 1+2*updates {
		t.Fatalf("fast reader got %d updates, want %d", len(got), 1+2*updates)
	}
	if got[0] != "add[10.0.0.1:80]" || got[1] != "remove[10.0.0.1:80]" || got[2] != "add[10.0.0.2:80]" || got[len(got)-1] != "add[10.0.0.201:80]" {
		t.Errorf("fast reader's sequence starts %v, ends %v", got[:3], got[len(got)-1])
	}
	if slowOverflows != 1 {
		t.Errorf("slow reader overflowed %d times, want 1", slowOverflows)
	}
	if err := slow.pump(context.Background(), func(*pb.Update) error { return nil }); !errors.Is(err, ErrOverflow) {
		t.Errorf("slow reader's stream ends with %v, want ErrOverflow", err)
	}
}
