package mirror

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// TestMirrorLabelsPolicy: with deploy/plexus-multicluster's admission
// policy, a tenant who may edit Services in a namespace can neither make
// one a mirror (the remote-discovery label destination answers by) nor
// change or remove a real mirror's labels; it can still edit a mirror
// otherwise and label its own Services freely. The service mirror's
// identity and cluster-admin may.
func TestMirrorLabelsPolicy(t *testing.T) {
	a := apiservertest.Start(t)
	// The service mirror's Role for the trust anchors lives in Plexus's
	// namespace.
	if _, err := a.Client(t, apiservertest.AdminToken).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plexus-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"namespace.yaml", "service-mirror.yaml", "mirror-labels-policy.yaml"} {
		a.Apply(t, "plexus-multicluster/"+f)
	}
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The tenant ("nobody") may do anything with Services in shop.
	if _, err := admin.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "service-editor"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "nobody"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "service-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant := a.Client(t, apiservertest.NobodyToken)
	exp := int64(3600)
	tok, err := admin.CoreV1().ServiceAccounts(mc.Namespace).CreateToken(ctx, "plexus-service-mirror",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mirror := a.Client(t, tok.Status.Token)

	svc := func(name string, labels map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	create := func(c kubernetes.Interface, s *corev1.Service) error {
		_, err := c.CoreV1().Services("shop").Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "only the multicluster service mirror sets them") {
			t.Errorf("%s: %v, want refused by the policy", what, err)
		}
	}
	// The policy takes a moment to be enforced after it is created.
	var err1 error
	attempt := 0
	if !eventually.Holds(10*time.Second, func() bool {
		attempt++
		name := fmt.Sprintf("forged-%d", attempt)
		err1 = create(tenant, svc(name, map[string]string{mc.RemoteDiscoveryLabel: "b", mc.RemoteNameLabel: "db"}))
		if err1 == nil {
			_ = admin.CoreV1().Services("shop").Delete(ctx, name, metav1.DeleteOptions{})
		}
		return err1 != nil
	}) {
		t.Fatalf("a tenant made a Service a mirror: %v", err1)
	}
	forbidden("a tenant making a Service a mirror", err1)
	if err := create(tenant, svc("own", map[string]string{"app": "own"})); err != nil {
		t.Errorf("a tenant's own Service: %v", err)
	}
	mirrorLabels := map[string]string{mc.MirroredServiceLabel: "true", mc.LinkLabel: "b", mc.RemoteNameLabel: "hello", mc.RemoteDiscoveryLabel: "b"}
	if err := create(mirror, svc("hello-b", mirrorLabels)); err != nil {
		t.Fatalf("the service mirror creating a mirror: %v", err)
	}
	if err := create(admin, svc("admin-b", mirrorLabels)); err != nil {
		t.Errorf("cluster-admin creating a mirror: %v", err)
	}

	update := func(name string, edit func(*corev1.Service)) error {
		cur, err := tenant.CoreV1().Services("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(cur)
		_, err = tenant.CoreV1().Services("shop").Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	forbidden("a tenant relabelling a mirror", update("hello-b", func(s *corev1.Service) { s.Labels[mc.RemoteNameLabel] = "db" }))
	forbidden("a tenant unmarking a mirror", update("hello-b", func(s *corev1.Service) { delete(s.Labels, mc.LinkLabel) }))
	forbidden("a tenant marking its own Service", update("own", func(s *corev1.Service) { s.Labels[mc.RemoteDiscoveryLabel] = "b" }))
	if err := update("hello-b", func(s *corev1.Service) { s.Labels["team"] = "x" }); err != nil {
		t.Errorf("a tenant's other edit of a mirror: %v", err)
	}
	// Gateway mode and federated Services: the same.
	forbidden("a tenant marking its own Service gateway", update("own", func(s *corev1.Service) { s.Labels[mc.GatewayLabel] = "b" }))
	forbidden("a tenant making its own Service federated", update("own", func(s *corev1.Service) { s.Labels[mc.FederatedLabel] = "db" }))
	fed := svc("web-federated", map[string]string{mc.MirroredServiceLabel: "true", mc.FederatedLabel: "web"})
	fed.Annotations = map[string]string{mc.FederatedClustersAnnotation: "b"}
	if err := create(mirror, fed); err != nil {
		t.Fatalf("the service mirror creating a federated Service: %v", err)
	}
	forbidden("a tenant adding a cluster to a federated Service", update("web-federated", func(s *corev1.Service) {
		s.Annotations[mc.FederatedClustersAnnotation] = "b,c"
	}))
	forbidden("a tenant annotating its own Service federated", update("own", func(s *corev1.Service) {
		s.Annotations = map[string]string{mc.FederatedClustersAnnotation: "b"}
	}))
	if err := update("web-federated", func(s *corev1.Service) { s.Annotations["note"] = "x" }); err != nil {
		t.Errorf("a tenant's other edit of a federated Service: %v", err)
	}

	t.Run("the policy type-checks against the Service schema", func(t *testing.T) {
		for _, w := range a.PolicyWarnings(t, "plexus-multicluster-mirror-labels") {
			t.Errorf("%s: %s", w.FieldRef, w.Warning)
		}
	})
}
