package identitycmd

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestGenerateIssuerOnce: the first run makes a valid anchor and issuer
// and the ConfigMap of the same anchors; a second run (a restart, an
// upgrade, another replica) changes nothing.
func TestGenerateIssuerOnce(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if err := GenerateIssuer(ctx, client, "plexus-system", identity.DefaultSecretName, "mesh.example", quiet); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("plexus-system").Get(ctx, identity.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	anchors, err := pki.ParseCerts(s.Data[identity.SecretAnchorsKey])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, a := range anchors {
		pool.AddCert(a)
	}
	issuer, err := pki.ParseIssuer(s.Data[identity.SecretCertKey], s.Data[identity.SecretKeyKey], pool, time.Now())
	if err != nil {
		t.Fatalf("the generated issuer does not load: %v", err)
	}
	if !strings.Contains(issuer.Certificate().Subject.CommonName, "mesh.example") {
		t.Errorf("issuer subject %q does not name the trust domain", issuer.Certificate().Subject.CommonName)
	}
	if s.Annotations[GeneratedByAnnotation] == "" || s.Labels["app.kubernetes.io/part-of"] != "plexus" {
		t.Errorf("generated Secret not marked: %v %v", s.Annotations, s.Labels)
	}
	cm, err := client.CoreV1().ConfigMaps("plexus-system").Get(ctx, AnchorsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[AnchorsBundleKey] != string(s.Data[identity.SecretAnchorsKey]) {
		t.Error("the ConfigMap's anchors are not the Secret's")
	}

	if err := GenerateIssuer(ctx, client, "plexus-system", identity.DefaultSecretName, "mesh.example", quiet); err != nil {
		t.Fatal(err)
	}
	again, _ := client.CoreV1().Secrets("plexus-system").Get(ctx, identity.DefaultSecretName, metav1.GetOptions{})
	if string(again.Data[identity.SecretKeyKey]) != string(s.Data[identity.SecretKeyKey]) {
		t.Error("a second run replaced the issuer")
	}
}

// TestGenerateIssuerKeepsGiven: a Secret that exists (given, or made by
// another replica) is used as is; only the missing ConfigMap is made.
func TestGenerateIssuerKeepsGiven(t *testing.T) {
	given := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: identity.DefaultSecretName},
		Data:       map[string][]byte{identity.SecretAnchorsKey: []byte("given anchors\n")},
	}
	client := fake.NewClientset(given)
	if err := GenerateIssuer(context.Background(), client, "plexus-system", identity.DefaultSecretName, "cluster.local", quiet); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("plexus-system").Get(context.Background(), AnchorsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[AnchorsBundleKey] != "given anchors\n" {
		t.Errorf("ConfigMap holds %q, want the given Secret's anchors", cm.Data[AnchorsBundleKey])
	}
}

// TestGenerateIssuerLosesRace: when another replica creates the Secret
// between our Get and Create, its anchors are the ones published.
func TestGenerateIssuerLosesRace(t *testing.T) {
	client := fake.NewClientset()
	winner := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: identity.DefaultSecretName},
		Data:       map[string][]byte{identity.SecretAnchorsKey: []byte("winner's anchors\n")},
	}
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		client.Tracker().Add(winner)
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, winner.Name)
	})
	if err := GenerateIssuer(context.Background(), client, "plexus-system", identity.DefaultSecretName, "cluster.local", quiet); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps("plexus-system").Get(context.Background(), AnchorsConfigMap, metav1.GetOptions{})
	if cm == nil || cm.Data[AnchorsBundleKey] != "winner's anchors\n" {
		t.Errorf("ConfigMap = %v, want the winner's anchors", cm)
	}
}

// TestGenerateIssuerForbidden: without the rights, it fails at once,
// naming the Secret.
func TestGenerateIssuerForbidden(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
	})
	start := time.Now()
	err := GenerateIssuer(context.Background(), client, "plexus-system", identity.DefaultSecretName, "cluster.local", quiet)
	if err == nil || !strings.Contains(err.Error(), "plexus-system/"+identity.DefaultSecretName) || !apierrors.IsForbidden(errors.Unwrap(errors.Unwrap(err))) {
		t.Fatalf("err = %v, want Forbidden naming the Secret", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("a Forbidden error was retried")
	}
}

// TestGenerateIssuerMendsStaleAnchors: a ConfigMap that does not hold the
// Secret's anchors is brought to them when identity made it, and is an
// error naming both when someone else did.
func TestGenerateIssuerMendsStaleAnchors(t *testing.T) {
	ctx := context.Background()
	old, _, err := pki.NewAnchorAndIssuer("cluster.local", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stale := func(generated bool) *corev1.ConfigMap {
		meta := generatedMeta("plexus-system", AnchorsConfigMap)
		if !generated {
			meta.Annotations = nil
		}
		return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{AnchorsBundleKey: string(pki.EncodeCerts(old.Cert))}}
	}
	client := fake.NewClientset(stale(true))
	if err := GenerateIssuer(ctx, client, "plexus-system", identity.DefaultSecretName, "cluster.local", quiet); err != nil {
		t.Fatal(err)
	}
	s, _ := client.CoreV1().Secrets("plexus-system").Get(ctx, identity.DefaultSecretName, metav1.GetOptions{})
	cm, _ := client.CoreV1().ConfigMaps("plexus-system").Get(ctx, AnchorsConfigMap, metav1.GetOptions{})
	if cm.Data[AnchorsBundleKey] != string(s.Data[identity.SecretAnchorsKey]) {
		t.Error("identity's stale ConfigMap was not brought to the Secret's anchors")
	}

	client = fake.NewClientset(stale(false))
	err = GenerateIssuer(ctx, client, "plexus-system", identity.DefaultSecretName, "cluster.local", quiet)
	if err == nil || !strings.Contains(err.Error(), "does not hold the anchors of the issuer Secret") {
		t.Errorf("someone else's stale ConfigMap: %v", err)
	}
}
