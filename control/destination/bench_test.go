package destination

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// sliceSize is the number of endpoints per EndpointSlice, the
// EndpointSlice controller's default maximum.
const sliceSize = 100

// BenchmarkPropagation measures how long an endpoint change takes from the
// start of the API write (one endpoint flips ready/unready) to the diff
// arriving on a subscribed gRPC stream, with the service holding 1,000
// and 5,000 endpoints in slices of 100. "fake" uses client-go's fake
// clientset; "apiserver" the local cluster's kube-apiserver (set
// PLEXUS_TEST_KUBECONFIG).
func BenchmarkPropagation(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("fake/endpoints=%d", n), func(b *testing.B) {
			benchmarkPropagation(b, fake.NewClientset(), "bench", n)
		})
	}
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("apiserver/endpoints=%d", n), func(b *testing.B) {
			c := clustertest.Connect(b)
			ns := c.Namespace(b, "plexus-destination-bench", nil)
			// Without client-side throttling (5 QPS by default): the
			// benchmark times the write itself.
			cfg := rest.CopyConfig(c.Config)
			cfg.QPS, cfg.Burst = -1, 0
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkPropagation(b, client, ns, n)
		})
	}
}

func benchmarkPropagation(b *testing.B, client kubernetes.Interface, ns string, n int) {
	ctx := context.Background()
	if _, err := client.CoreV1().Services(ns).Create(ctx, service(ns, "big", "", svcPort("", 80, intstr.FromInt32(8080))), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var sliceList []*discoveryv1.EndpointSlice
	for i := 0; i < n; i += sliceSize {
		var eps []sliceEndpoint
		for j := i; j < min(i+sliceSize, n); j++ {
			eps = append(eps, sliceEndpoint{ip: benchIP(j).String(), ready: true})
		}
		s, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx,
			endpointSlice(ns, fmt.Sprintf("big-%03d", i/sliceSize), "big", discoveryv1.AddressTypeIPv4, "", 8080, eps...), metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sliceList = append(sliceList, s)
	}
	dst, _ := testServer(b, client, DefaultConfig())
	stream := open(b, dst.Get, "big."+ns+".svc.cluster.local:80")
	// The slices may reach the informer in several events: wait for all.
	for have := 0; have < n; {
		u := stream.next(b, 30*time.Second)
		have += len(u.GetAdd().GetAddrs())
	}

	var lat []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Flip endpoint i of the set: i/n-th round decides the direction.
		idx := i % n
		ready := (i/n)%2 == 1
		s := sliceList[idx/sliceSize]
		s.Endpoints[idx%sliceSize].Conditions.Ready = &ready
		start := time.Now()
		updated, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sliceList[idx/sliceSize] = updated
		u := stream.next(b, 10*time.Second)
		lat = append(lat, time.Since(start))
		want := benchIP(idx)
		var got *pb.WeightedAddr
		if ready {
			got = u.GetAdd().GetAddrs()[0]
		} else {
			got = u.GetRemove().GetAddrs()[0]
		}
		if ip, _ := netip.AddrFromSlice(got.GetAddr().GetIp()); ip != want {
			b.Fatalf("update %d: got %v for %v (ready=%v)", i, u, want, ready)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(sum)/float64(len(lat)), "ms/update")
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

// benchIP is the address of endpoint i: 10.200.0.0 + i.
func benchIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
}
