package identity

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
	"github.com/plexus-mesh/plexus/testsupport/identitytest"
)

// The tap identity (plexus-viz/plexus-tap) is certified only while the viz
// extension declares its namespace in the control plane's namespace: a
// tenant who created plexus-viz and the service account, with a valid
// token, gets nothing; a declaration naming another namespace does not
// count; once declared, the same request is certified; namespaces not
// reserved are not affected.
func TestReservedNamespaces(t *testing.T) {
	const tapID = "spiffe://cluster.local/ns/plexus-viz/sa/plexus-tap"
	f := newFixture(t, true, map[string]identitytest.Answer{
		"tap": identitytest.ServiceAccount("plexus-viz", "plexus-tap", DefaultAudience),
		"web": identitytest.ServiceAccount("emojivoto", "web", DefaultAudience),
	})
	f.srv.cfg.ReservedNamespaces = DefaultReservedNamespaces
	certify := func(id, token string) error {
		_, err := f.srv.Certify(context.Background(), &identitypb.CertifyRequest{Identity: id, Token: []byte(token),
			CertificateSigningRequest: makeCSR(t, csrOpts{uris: []string{id}})})
		return err
	}
	rejected := func() float64 {
		return testutil.ToFloat64(f.srv.metrics.rejected.WithLabelValues("reserved_namespace"))
	}

	if err := certify(tapID, "tap"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "reserved for a Plexus extension that is not installed") ||
		!strings.Contains(err.Error(), "plexus-system/plexus-extension-plexus-viz") {
		t.Errorf("tap identity, viz not declared: %v; want PermissionDenied naming the missing declaration", err)
	}
	if rejected() != 1 {
		t.Errorf("rejected{reason=reserved_namespace} = %v, want 1", rejected())
	}
	if err := certify(webID, "web"); err != nil {
		t.Errorf("an identity outside the reserved namespaces: %v", err)
	}
	cms := f.client.CoreV1().ConfigMaps(testNS)
	decl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DeclarationName("plexus-viz")}, Data: map[string]string{"namespace": "elsewhere"}}
	if _, err := cms.Create(context.Background(), decl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := certify(tapID, "tap"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a declaration naming another namespace: %v; want PermissionDenied", err)
	}
	decl.Data["namespace"] = "plexus-viz"
	if _, err := cms.Update(context.Background(), decl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := certify(tapID, "tap"); err != nil {
		t.Errorf("tap identity, viz declared: %v", err)
	}
	// A declaration that cannot be read is a refusal the proxy retries
	// (Unavailable), never a certificate.
	f.client.(*fake.Clientset).PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	if err := certify(tapID, "tap"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("declaration unreadable: %v; want Unavailable with the cause", err)
	}
}
