package webhookcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testKeeper(t *testing.T, objs ...any) (*Keeper, *fake.Clientset) {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-injector", ResourceVersion: "1"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.plexus.dev"}, {Name: "b.plexus.dev"}},
	}
	client := fake.NewClientset(mwc)
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			client.Tracker().Add(s)
		}
	}
	k, err := New(Config{
		Namespace: "plexus-system", Service: "plexus-injector", Secret: "plexus-injector-tls",
		WebhookConfig: "plexus-injector", Validity: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour,
		Log: slog.New(slog.DiscardHandler),
	}, client)
	if err != nil {
		t.Fatal(err)
	}
	return k, client
}

func caBundles(t *testing.T, k *Keeper) [][]byte {
	t.Helper()
	mwc, err := k.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "plexus-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range mwc.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func servingSerial(t *testing.T, k *Keeper) string {
	t.Helper()
	c, err := k.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber.String()
}

func TestEnsureIssuesReusesAndRenews(t *testing.T) {
	ctx := context.Background()
	k, _ := testKeeper(t)
	if _, err := k.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before Ensure")
	}
	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first := servingSerial(t, k)
	bundles := caBundles(t, k)
	block, _ := pem.Decode(bundles[0])
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !bytes.Equal(bundles[0], bundles[1]) {
		t.Fatalf("caBundles not set to one CA: %v", err)
	}
	cert, _ := k.GetCertificate(nil)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "plexus-injector.plexus-system.svc", Roots: roots}); err != nil {
		t.Fatalf("serving certificate does not verify against the caBundle: %v", err)
	}

	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := servingSerial(t, k); got != first {
		t.Fatal("a valid certificate was replaced")
	}

	k.now = func() time.Time { return time.Now().Add(340 * 24 * time.Hour) }
	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := servingSerial(t, k); got == first {
		t.Fatal("a certificate within RenewBefore of expiry was not renewed")
	}
	if bytes.Equal(caBundles(t, k)[0], bundles[0]) {
		t.Fatal("caBundle not updated after renewal")
	}
}

func TestEnsureReplacesGarbage(t *testing.T) {
	garbage := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-injector-tls", Namespace: "plexus-system"},
		Data:       map[string][]byte{"tls.crt": []byte("nope"), "tls.key": []byte("nope")},
	}
	k, client := testKeeper(t, garbage)
	if err := k.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, _ := client.CoreV1().Secrets("plexus-system").Get(context.Background(), "plexus-injector-tls", metav1.GetOptions{})
	if bytes.Equal(s.Data["tls.crt"], []byte("nope")) {
		t.Fatal("garbage secret kept")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Namespace: "a", Service: "b", Secret: "c", WebhookConfig: "d", Validity: time.Hour, RenewBefore: 2 * time.Hour}).Validate(); err == nil {
		t.Fatal("renew-before above validity accepted")
	}
}

func TestEnsurePatchesAValidatingWebhookConfiguration(t *testing.T) {
	ctx := context.Background()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-sp-validator", ResourceVersion: "1"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "sp-validator.plexus.dev"}},
	}
	client := fake.NewClientset(vwc)
	k, err := New(Config{
		Namespace: "plexus-system", Service: "plexus-sp-validator", Secret: "plexus-sp-validator-tls",
		WebhookConfig: "plexus-sp-validator", Validating: true, Validity: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour,
		Log: slog.New(slog.DiscardHandler),
	}, client)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "plexus-sp-validator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("plexus-system").Get(ctx, "plexus-sp-validator-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
		t.Errorf("caBundle %q, want the Secret's CA", got.Webhooks[0].ClientConfig.CABundle)
	}
	// A mutating configuration of that name is not what it keeps.
	k.cfg.Validating = false
	if err := k.Ensure(ctx); err == nil {
		t.Error("Ensure found a MutatingWebhookConfiguration that does not exist")
	}
}
