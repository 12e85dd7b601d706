package mirror

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// TestTokenRenewedInPlace (issue 27's T8): a Link whose credentials are
// a token of b's remote-access account, bound to a Secret in b, gets a
// new token before the old one is due, written into its credentials
// Secret in place; the mirror keeps its UID and the Link stays Ready
// throughout (the new watch takes over once synced); and the new token is
// bound to the same Secret, so deleting it there cuts the link off.
func TestTokenRenewedInPlace(t *testing.T) {
	var c *Controller
	a, b := pairEnv(t, func(ctl *Controller) { c = ctl; c.RenewAt = 0.01 }) // 600 s tokens: renewed after 6 s
	ctx := context.Background()
	export(t, b, "hello", true)
	within(t, "mirror hello-b created", mirrorOK(a, "hello-b"))

	binding := remoteAccess(t, b)
	seconds := int64(600)
	tok, err := b.core.CoreV1().ServiceAccounts(mc.Namespace).CreateToken(ctx, "plexus-mc-remote-access", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := a.core.CoreV1().Secrets(mc.Namespace).Get(ctx, "cluster-credentials-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[mc.CredentialsKey] = b.kubeconfig(tok.Status.Token)
	if _, err := a.core.CoreV1().Secrets(mc.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mirror, err := a.core.CoreV1().Services("shop").Get(ctx, "hello-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createLink(t, a, "touch", "c", "no-such-secret") // any Link event: b's status is rewritten only on change

	// Watch Ready while the credentials change twice: to the bound
	// token, then to its renewal.
	var notReady atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if st, ok := linkStatusOf(t, a, "b"); ok && !ready(st) {
				notReady.Add(1)
			}
		}
	}()
	start := time.Now()
	if !eventually.Holds(30*time.Second, func() bool { return tokenIn(t, a) != tok.Status.Token && tokenIn(t, a) != apiserverAdmin }) {
		t.Fatal("the token was not renewed within 30 s")
	}
	t.Logf("token renewed %v after it was installed", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(2 * time.Second) // Sleep: the new watch syncs and takes over meanwhile; Ready is sampled throughout
	close(stop)
	<-done
	if n := notReady.Load(); n > 0 {
		t.Errorf("Link b was not Ready in %d samples while its credentials changed", n)
	}
	if cur, err := a.core.CoreV1().Services("shop").Get(ctx, "hello-b", metav1.GetOptions{}); err != nil || cur.UID != mirror.UID {
		t.Errorf("the mirror was replaced while the credentials changed: %v %v", cur, err)
	}
	export(t, b, "api", true)
	within(t, "with the renewed token: api mirrored", mirrorOK(a, "api-b"))
	if n := testutil.ToFloat64(c.metrics.renewals.WithLabelValues("b", "ok")); n < 1 {
		t.Errorf("renewals counted: %v", n)
	}
	if exp := testutil.ToFloat64(c.metrics.tokenExpiry.WithLabelValues("b")); exp < float64(time.Now().Add(5*time.Minute).Unix()) {
		t.Errorf("token expiry exported as %v, want the renewed token's (about 10 minutes ahead)", exp)
	}

	if err := b.core.CoreV1().Secrets(mc.Namespace).Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Cut off: b refuses the token (renewed or not) from then on.
	if !eventually.Holds(unreachableAfter+40*time.Second, func() bool {
		st, _ := linkStatusOf(t, a, "b")
		for _, c := range st.Conditions {
			if c.Type == mc.ConditionRemoteReachable {
				return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "Unauthorized")
			}
		}
		return false
	}) {
		st, _ := linkStatusOf(t, a, "b")
		t.Errorf("deleting the binding Secret did not cut the renewed token off: %+v", st.Conditions)
	}
}

// apiserverAdmin is what pairEnv's credentials hold first.
const apiserverAdmin = "admin-token"

// remoteAccess creates in b what deploy/plexus-multicluster/remote-access.yaml
// does (the account, its read rights, its token rights) and a Secret for
// its tokens to be bound to.
func remoteAccess(t *testing.T, b api) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	const sa = "plexus-mc-remote-access"
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: mc.Namespace}}
	for _, err := range []error{
		create(b.core.CoreV1().ServiceAccounts(mc.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})),
		create(b.core.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}}, metav1.CreateOptions{})),
		create(b.core.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sa}, Subjects: subjects}, metav1.CreateOptions{})),
		create(b.core.RbacV1().Roles(mc.Namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{sa}, Verbs: []string{"create"}},
		}}, metav1.CreateOptions{})),
		create(b.core.RbacV1().RoleBindings(mc.Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa}, Subjects: subjects}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	binding, err := b.core.CoreV1().Secrets(mc.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plexus-mc-link-b-1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return binding
}

func create[T any](_ T, err error) error { return err }

// tokenIn is the token of a's credentials for Link b.
func tokenIn(t *testing.T, a api) string {
	secret, err := a.core.CoreV1().Secrets(mc.Namespace).Get(context.Background(), "cluster-credentials-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(secret.Data[mc.CredentialsKey])
	if err != nil {
		t.Fatal(err)
	}
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

func ready(st mc.LinkStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == mc.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
