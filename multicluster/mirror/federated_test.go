package mirror

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// federatedIn reports whether a holds the federated Service shop/hello-federated
// of members hello spanning the linked clusters clusters ("b", or "").
func federatedIn(a api, name, clusters string) func() bool {
	return func() bool {
		svc, err := a.core.CoreV1().Services("shop").Get(context.Background(), name+mc.FederatedSuffix, metav1.GetOptions{})
		return err == nil && svc.Labels[mc.FederatedLabel] == name && svc.Labels[mc.MirroredServiceLabel] == "true" &&
			svc.Annotations[mc.FederatedClustersAnnotation] == clusters &&
			len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == 80 && svc.Spec.Selector == nil
	}
}

// TestFederatedLifecycle (issue 27's T1 and T5, on two real API servers):
// a Service exported as federated in b makes hello-federated in a, which
// spans b (and no mirror hello-b); a's own hello joins it and keeps it
// while b leaves; it goes with its last member, and a Link's deletion
// takes b's membership within 5 s. A Service of its name that is not
// the federated Service is reported and left alone.
func TestFederatedLifecycle(t *testing.T) {
	a, b := pairEnv(t)
	ctx := context.Background()

	export(t, b, "hello", true)
	within(t, "flat export: mirror hello-b", mirrorOK(a, "hello-b"))
	exportAs(t, b, "hello", mc.ExportedFederated)
	within(t, "federated in b: hello-federated spans b", federatedIn(a, "hello", "b"))
	within(t, "federated in b: the flat mirror hello-b goes", gone(a, "hello-b"))
	within(t, "Link status: hello Mirrored as hello-federated", func() bool {
		st, _ := linkStatusOf(t, a, "b")
		for _, m := range st.MirrorServices {
			if m.RemoteRef.Name == "hello" && m.LocalRef.Name == "hello-federated" && m.Conditions[0].Reason == reasonMirrored {
				return true
			}
		}
		return false
	})

	exportAs(t, a, "hello", mc.ExportedFederated) // a's own member
	exportAs(t, b, "hello", "")
	within(t, "b leaves: hello-federated spans a's member only", federatedIn(a, "hello", ""))
	exportAs(t, a, "hello", "")
	within(t, "the last member leaves: hello-federated goes", gone(a, "hello-federated"))

	exportAs(t, b, "hello", mc.ExportedFederated)
	within(t, "b joins again", federatedIn(a, "hello", "b"))
	exportAs(t, b, "api", mc.ExportedFederated)
	exportAs(t, a, "api", mc.ExportedFederated)
	within(t, "api-federated spans b", federatedIn(a, "api", "b"))

	local, err := a.core.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-federated"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exportAs(t, b, "web", mc.ExportedFederated)
	within(t, "collision reported", func() bool { return mirrorReason(t, a, "web") == reasonNameCollision })
	if cur, err := a.core.CoreV1().Services("shop").Get(ctx, "web-federated", metav1.GetOptions{}); err != nil || cur.ResourceVersion != local.ResourceVersion {
		t.Errorf("the local web-federated was touched: %v %v", cur, err)
	}

	if err := a.dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, "Link deleted: hello-federated (b its only member) goes", gone(a, "hello-federated"))
	within(t, "Link deleted: api-federated spans a's member only", federatedIn(a, "api", ""))
}
