package mirror

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// BenchmarkMirrorPropagation (issue 27: mirror propagation with 1 and 500
// exported Services), on two real API servers: the time from creating an
// exported Service in b to its mirror's ADDED event in a, with n Services
// already mirrored. first-sync-ms is how long the n took to be mirrored
// when the Link came up with them exported.
func BenchmarkMirrorPropagation(b *testing.B) {
	for _, n := range []int{1, 500} {
		b.Run(fmt.Sprintf("exported=%d", n), func(b *testing.B) {
			ctx := context.Background()
			a, rb := startPair(b)
			for i := range n {
				createExported(b, rb, fmt.Sprintf("svc-%03d", i))
			}
			w, err := a.core.CoreV1().Services("shop").Watch(ctx, metav1.ListOptions{LabelSelector: labels.Set{mc.LinkLabel: "b"}.String()})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			added := make(chan string, n+b.N+10)
			go func() {
				for ev := range w.ResultChan() {
					if svc, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added {
						added <- svc.Name
					}
				}
			}()
			start := time.Now()
			linkPair(b, a, rb)
			for seen := 0; seen < n; seen++ {
				select {
				case <-added:
				case <-time.After(5 * time.Minute):
					list, err := a.core.CoreV1().Services("shop").List(ctx, metav1.ListOptions{LabelSelector: labels.Set{mc.LinkLabel: "b"}.String()})
					b.Fatalf("%d of the first %d mirrors' ADDED events within 5 minutes; a holds %d mirrors (%v)", seen, n, len(list.Items), err)
				}
			}
			firstSync := time.Since(start)

			var took []time.Duration
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("probe-%d", i)
				t0 := time.Now()
				createExported(b, rb, name)
				for got := ""; got != name+"-b"; {
					select {
					case got = <-added:
					case <-time.After(30 * time.Second):
						b.Fatalf("no mirror of %s within 30 s", name)
					}
				}
				took = append(took, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(firstSync.Milliseconds()), "first-sync-ms") // after ResetTimer, which drops metrics
		})
	}
}

func createExported(b *testing.B, c api, name string) {
	b.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{mc.ExportedLabel: mc.ExportedRemoteDiscovery}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := c.core.CoreV1().Services("shop").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
}
