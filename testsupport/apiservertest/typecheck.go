package apiservertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyWarnings returns what Kubernetes' type checker of admission
// policies says of the ValidatingAdmissionPolicy named policy: the CEL
// expressions that do not type-check against the schemas of the resources
// the policy matches (an unknown field, a comprehension over an object).
// The API server enforces such a policy anyway, so only this finds them
// before a request fails. The checker runs in kube-controller-manager
// (its validatingadmissionpolicy-status-controller), started here for
// the test against this server.
func (a *Server) PolicyWarnings(t testing.TB, policy string) []admissionregistrationv1.ExpressionWarning {
	t.Helper()
	kubeconfig := filepath.Join(a.dir, "controller-manager.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, a.URL, a.CAFile, AdminToken)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	startProc(t, a.dir, "kube-controller-manager", filepath.Join(a.bin, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--controllers=validatingadmissionpolicy-status-controller",
		"--leader-elect=false", "--secure-port=0")
	admin := a.Client(t, AdminToken)
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(context.Background(), policy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil {
			return p.Status.TypeChecking.ExpressionWarnings
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %s not type-checked after 60s: status %+v", policy, p.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
