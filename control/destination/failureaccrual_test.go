package destination

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// logRecords collects the server's log records (slog writes each one
// with one Write); it holds 10,000.
type logRecords chan string

func (r logRecords) Write(p []byte) (int, error) { r <- string(p); return len(p), nil }

// count takes the records logged so far and counts those containing s.
func (r logRecords) count(s string) (n int) {
	for {
		select {
		case rec := <-r:
			if strings.Contains(rec, s) {
				n++
			}
		default:
			return n
		}
	}
}

// TestOutboundPolicyFailureAccrual: the policy streams of a Service with
// failure accrual carry it; a change of the Service's annotations alone
// pushes the new policy to every stream of that Service, by name and by
// ClusterIP; a malformed value falls back to its default and is logged
// once, not once per stream.
func TestOutboundPolicyFailureAccrual(t *testing.T) {
	objs := routeFixture()
	web := objs[0].(*corev1.Service)
	web.Annotations = map[string]string{
		balancerannotations.AnnotationFailureAccrual: "consecutive",
		balancerannotations.AnnotationMaxFailures:    "3",
	}
	log := make(logRecords, 10000)
	c := startRouteClusterLogging(t, log, true, objs...)
	byName, byIP := c.watch(t, webPath, "client"), c.watch(t, webClusterIP+":80", "client")
	expectAccrual := func(what string, wantFailures uint32) {
		t.Helper()
		for _, s := range []*recvStream[*pb.OutboundPolicy]{byName, byIP} {
			a := expectPolicy(t, s, webDefault).FailureAccrual
			if a.GetConsecutiveFailures() != wantFailures || a.GetMinPenalty().AsDuration() != time.Second ||
				a.GetMaxPenalty().AsDuration() != time.Minute || a.GetJitterRatio() != 0.5 || a.GetMinHealthyPercent() != 50 {
				t.Fatalf("%s: failure accrual %v, want %d failures and the defaults", what, a, wantFailures)
			}
		}
	}
	expectAccrual("first policy", 3)

	annotate := func(annotations map[string]string) {
		t.Helper()
		ctx := context.Background()
		svc, err := c.core.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Annotations = annotations
		if _, err := c.core.CoreV1().Services("ns").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate(map[string]string{balancerannotations.AnnotationFailureAccrual: "consecutive", balancerannotations.AnnotationMaxFailures: "5"})
	expectAccrual("after an annotation change", 5)

	annotate(map[string]string{balancerannotations.AnnotationFailureAccrual: "consecutive", balancerannotations.AnnotationMaxFailures: "five"})
	expectAccrual("after a malformed max-failures", 7)
	problem := `balancer.plexus.dev/failure-accrual-consecutive-max-failures: \"five\" is not an integer of at least 1`
	if n := log.count(problem); n != 1 {
		t.Errorf("the malformed annotation was logged %d times, want once", n)
	}

	annotate(nil)
	for _, s := range []*recvStream[*pb.OutboundPolicy]{byName, byIP} {
		if a := expectPolicy(t, s, webDefault).FailureAccrual; a != nil {
			t.Errorf("annotations removed: failure accrual %v", a)
		}
	}
	byName.quiet(t, 100*time.Millisecond)
}
