package destination

import (
	"context"
	"net/netip"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

func TestSliceEndpointState(t *testing.T) {
	yes, no := ptr(true), ptr(false)
	for _, tc := range []struct {
		name                         string
		ready, serving, terminating  *bool
		wantPublish, wantTerminating bool
	}{
		{"ready unset", nil, nil, nil, true, false},
		{"ready", yes, yes, nil, true, false},
		{"ready, terminating unset as false", yes, nil, no, true, false},
		{"serving while terminating", no, yes, yes, true, true},
		{"terminating, no longer serving", no, no, yes, false, false},
		{"terminating, serving unset", no, nil, yes, false, false},
		{"serving, terminating unset", no, yes, nil, false, false},
		{"not ready, not terminating", no, yes, no, false, false},
		{"not ready, nothing else", no, nil, nil, false, false},
	} {
		publish, terminating := SliceEndpointState(discoveryv1.EndpointConditions{Ready: tc.ready, Serving: tc.serving, Terminating: tc.terminating})
		if publish != tc.wantPublish || terminating != tc.wantTerminating {
			t.Errorf("%s: publish %v terminating %v, want %v %v", tc.name, publish, terminating, tc.wantPublish, tc.wantTerminating)
		}
	}
}

// TestDiffTerminatingFlip: an endpoint whose only change is the
// terminating flag is sent again in an Add carrying the new flag.
func TestDiffTerminatingFlip(t *testing.T) {
	ready := ep("10.0.0.1:80", "zone", "a")
	terminating := ready
	terminating.terminating = true
	for _, tc := range []struct {
		name     string
		old, cur endpoint
	}{
		{"ready to terminating", ready, terminating},
		{"terminating to ready", terminating, ready},
	} {
		us := diffUpdates(snap(true, tc.old), snap(true, tc.cur))
		if got := describe(us...); !equalStrings(got, []string{"add[10.0.0.1:80]"}) {
			t.Fatalf("%s: updates %v, want one add", tc.name, got)
		}
		if a := us[0].GetAdd().Addrs[0]; a.Terminating != tc.cur.terminating || a.MetricLabels["zone"] != "a" {
			t.Errorf("%s: added %v, want terminating %v and zone a", tc.name, a, tc.cur.terminating)
		}
	}
}

// conditions sets the conditions of the i-th endpoint of slice.
func conditions(slice *discoveryv1.EndpointSlice, i int, ready, serving, terminating bool) {
	slice.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
}

// TestStreamTerminatingEndpoints: an endpoint serving while it terminates
// is published with terminating set (and its zone); one that has stopped
// serving, or is not ready for another reason, is not. A change of state
// reaches the stream.
func TestStreamTerminatingEndpoints(t *testing.T) {
	slice := endpointSlice("ns", "web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.1.0.1", true, ""}, sliceEndpoint{"10.1.0.2", true, ""},
		sliceEndpoint{"10.1.0.3", true, ""}, sliceEndpoint{"10.1.0.4", true, ""})
	slice.Endpoints[1].Zone = ptr("zone-b")
	conditions(slice, 1, false, true, true)  // draining
	conditions(slice, 2, false, false, true) // terminating, no longer serving
	conditions(slice, 3, false, true, false) // not ready (a failing probe)
	client := fake.NewClientset(service("ns", "web", "10.96.0.10", svcPort("http", 80, intstr.FromString("http"))), slice)
	dst, _ := testServer(t, client, DefaultConfig())
	s := open(t, dst.Get, "web.ns.svc.cluster.local:80")
	addrs := s.expectUpdates(t, wait, "add[10.1.0.1:8080 10.1.0.2:8080]")[0].GetAdd().Addrs
	if addrs[0].Terminating || !addrs[1].Terminating || addrs[1].MetricLabels["zone"] != "zone-b" {
		t.Errorf("first add %v: want 10.1.0.1 ready, 10.1.0.2 terminating in zone-b", addrs)
	}

	update := func() {
		t.Helper()
		if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(context.Background(), slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 10.1.0.1 starts terminating: only its flag changes.
	conditions(slice, 0, false, true, true)
	update()
	if a := s.expectUpdates(t, wait, "add[10.1.0.1:8080]")[0].GetAdd().Addrs[0]; !a.Terminating {
		t.Errorf("10.1.0.1 after it started terminating: %v", a)
	}
	// 10.1.0.2 stops serving: it goes.
	conditions(slice, 1, false, false, true)
	update()
	s.expectUpdates(t, wait, "remove[10.1.0.2:8080]")
	// 10.1.0.3 is ready again (a terminating pod's readiness recovered).
	conditions(slice, 2, true, true, false)
	update()
	if a := s.expectUpdates(t, wait, "add[10.1.0.3:8080]")[0].GetAdd().Addrs[0]; a.Terminating {
		t.Errorf("ready 10.1.0.3 sent as terminating: %v", a)
	}
}

// TestAddressInTwoSlicesIsReady: an address that one slice lists as
// ready and another as terminating (a pod moving between slices) is
// ready, whichever slice comes first.
func TestAddressInTwoSlicesIsReady(t *testing.T) {
	w := &watcher{cfg: DefaultConfig()}
	ready := discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}}
	draining := discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}}
	addr := netip.MustParseAddrPort("10.1.0.1:8080")
	for _, tc := range []struct {
		name            string
		eps             []*discoveryv1.Endpoint
		wantTerminating bool
	}{
		{"ready first", []*discoveryv1.Endpoint{&ready, &draining}, false},
		{"terminating first", []*discoveryv1.Endpoint{&draining, &ready}, false},
		{"terminating in both", []*discoveryv1.Endpoint{&draining, &draining}, true},
	} {
		s := snapshot{endpoints: map[netip.AddrPort]endpoint{}}
		for _, e := range tc.eps {
			w.addSliceEndpoint(&s, e, "ns", addr.Port())
		}
		if e, ok := s.endpoints[addr]; !ok || len(s.endpoints) != 1 || e.terminating != tc.wantTerminating {
			t.Errorf("%s: endpoints %v, want %s with terminating %v", tc.name, s.endpoints, addr, tc.wantTerminating)
		}
	}
}
