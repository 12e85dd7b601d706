package mesh

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// testHeadless (issue 27's T9, flat): a StatefulSet db of two pods in b
// behind the headless Service db, exported. In a, the mirror db-b is
// headless and db-0.db-b.<ns>.svc.cluster.local resolves to b's db-0,
// which answers a's client over mTLS (b's db-0 names it); after the
// service mirror restarts, the mirror's EndpointSlice is the same object,
// unchanged, and db-1 answers by its name too. Un-exported, the mirror
// and its slice go.
func testHeadless(t *testing.T, g gatewayCase) {
	ctx := clustertest.Context(t, 5*time.Minute)
	labels := map[string]string{"app": "db"}
	if _, err := g.b.Client.CoreV1().ServiceAccounts(g.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.b.Client.CoreV1().Services(g.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	if _, err := g.b.Client.AppsV1().StatefulSets(g.ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("db", "serve", ":8080")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 3*time.Minute, "b's StatefulSet db ready", func(ctx context.Context) (bool, error) {
		s, err := g.b.Client.AppsV1().StatefulSets(g.ns).Get(ctx, "db", metav1.GetOptions{})
		return err == nil && s.Status.ReadyReplicas == 2, nil
	})
	setExport(t, g.b, g.ns, "db", mc.ExportedRemoteDiscovery)
	hosts := func() []string {
		s, err := g.a.Client.DiscoveryV1().EndpointSlices(g.ns).Get(context.Background(), "db-b", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		var out []string
		for _, e := range s.Endpoints {
			if e.Hostname != nil {
				out = append(out, *e.Hostname)
			}
		}
		slices.Sort(out)
		return out
	}
	within(t, "headless mirror db-b in a, its slice naming db-0 and db-1", 10*time.Second, func() bool {
		m, err := g.a.Client.CoreV1().Services(g.ns).Get(context.Background(), "db-b", metav1.GetOptions{})
		return err == nil && m.Spec.ClusterIP == corev1.ClusterIPNone && slices.Equal(hosts(), []string{"db-0", "db-1"})
	}, nil)

	byName := func(pod string) {
		t.Helper()
		url := "http://" + pod + ".db-b." + g.ns + ".svc.cluster.local:8080/"
		var res loadResult
		var err error
		within(t, "a's client reaches b's "+pod+" by its name", 45*time.Second, func() bool {
			res, err = execLoad(ctx, g.a, g.ns, g.client, "-n", "10", "-timeout", "5s", url)
			return err == nil && res.Statuses["200"] == 10 && res.Servers[pod] == 10
		}, func() string { return briefResult(res) + " " + errString(err) })
		wantSeries(t, proxyMetrics(t, g.b, g.ns, pod), "request_total", `direction="inbound"`, `tls="true"`, `client_id="`+g.id("client")+`"`)
	}
	byName("db-0")

	before, err := g.a.Client.DiscoveryV1().EndpointSlices(g.ns).Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.a.Kubectl(t, "-n", mc.Namespace, "rollout", "restart", "deployment/plexus-service-mirror")
	g.a.Kubectl(t, "-n", mc.Namespace, "rollout", "status", "deployment/plexus-service-mirror", "--timeout=2m")
	time.Sleep(2 * time.Second) // the new service mirror's first syncs
	after, err := g.a.Client.DiscoveryV1().EndpointSlices(g.ns).Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil || after.UID != before.UID || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("after the service mirror restarted, db-b's slice was replaced or rewritten: %v", err)
	}
	byName("db-1")

	setExport(t, g.b, g.ns, "db", "")
	within(t, "un-exported: db-b and its slice gone from a", 15*time.Second, func() bool {
		_, errSvc := g.a.Client.CoreV1().Services(g.ns).Get(context.Background(), "db-b", metav1.GetOptions{})
		list, errSl := g.a.Client.DiscoveryV1().EndpointSlices(g.ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-b"})
		return errSvc != nil && errSl == nil && len(list.Items) == 0
	}, nil)
}
