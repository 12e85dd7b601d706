package mirror

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/multicluster/trust"
)

// TestLinkRefusedWithoutCommonAnchor (issue 27's T7): while the anchors
// the two clusters hand their proxies have none in common, the Link says
// so, naming both, is not Ready and mirrors nothing (its mirror goes);
// once b's bundle overlaps a's (as during a rotation) it is trusted and
// mirrors again.
func TestLinkRefusedWithoutCommonAnchor(t *testing.T) {
	a, b := pairEnv(t, func(c *Controller) { c.TrustRecheck = 300 * time.Millisecond })
	export(t, b, "hello", true)
	within(t, "mirror hello-b created (no anchors to compare yet)", mirrorOK(a, "hello-b"))

	anchorA, anchorB := testAnchor(t, "a.example"), testAnchor(t, "b.example")
	setAnchors(t, a, pki.EncodeCerts(anchorA.Cert))
	setAnchors(t, b, pki.EncodeCerts(anchorB.Cert))
	condition := func(typ string) metav1.Condition {
		st, _ := linkStatusOf(t, a, "b")
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		return metav1.Condition{}
	}
	within(t, "disjoint anchors: Link refused", func() bool {
		c, r := condition(mc.ConditionTrustVerified), condition(mc.ConditionReady)
		return c.Status == metav1.ConditionFalse && c.Reason == "NoCommonAnchor" && r.Status == metav1.ConditionFalse && r.Reason == "NoCommonAnchor"
	})
	t.Logf("refused: %s", condition(mc.ConditionTrustVerified).Message)
	within(t, "disjoint anchors: the mirror deleted", gone(a, "hello-b"))
	within(t, "disjoint anchors: hello reported refused", func() bool { return mirrorReason(t, a, "hello") == reasonRefused })

	setAnchors(t, b, pki.EncodeCerts(anchorB.Cert, anchorA.Cert))
	within(t, "overlapping bundle: trusted", func() bool {
		return condition(mc.ConditionTrustVerified).Status == metav1.ConditionTrue && condition(mc.ConditionReady).Status == metav1.ConditionTrue
	})
	within(t, "overlapping bundle: mirrored again", mirrorOK(a, "hello-b"))
}

func testAnchor(t *testing.T, td string) pki.CA {
	t.Helper()
	ca, err := pki.NewAnchor(pki.CAOptions{TrustDomain: td})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// setAnchors writes c's trust anchors ConfigMap (and its namespace).
func setAnchors(t *testing.T, c api, bundle []byte) {
	t.Helper()
	ctx := context.Background()
	_, _ = c.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: trust.Namespace}}, metav1.CreateOptions{})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: trust.Namespace, Name: trust.ConfigMap}, Data: map[string]string{trust.BundleKey: string(bundle)}}
	if _, err := c.core.CoreV1().ConfigMaps(trust.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err := c.core.CoreV1().ConfigMaps(trust.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
