// Package webhookcert keeps an admission webhook's serving certificate:
// a private CA and a serving certificate stored in a Secret (so replicas
// share them), renewed before they expire, with the CA patched into the
// webhook configuration's caBundle.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/component"
)

// Config names the objects and lifetimes.
type Config struct {
	Namespace     string // where the Service and Secret live
	Service       string // the webhook's Service; the certificate names it
	Secret        string // kubernetes.io/tls Secret holding ca.crt, tls.crt, tls.key
	WebhookConfig string // webhook configuration whose caBundles are kept
	// APIService, instead of WebhookConfig: the aggregated API
	// (apiregistration.k8s.io/v1 APIService) whose caBundle is kept.
	APIService string
	// Validating: WebhookConfig is a ValidatingWebhookConfiguration, not a
	// MutatingWebhookConfiguration.
	Validating  bool
	Validity    time.Duration
	RenewBefore time.Duration
	Log         *slog.Logger
}

// Validate names the first missing field.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "" || c.Service == "" || c.Secret == "" || (c.WebhookConfig == "") == (c.APIService == ""):
		return errors.New("webhookcert: namespace, service, secret and one webhook configuration or APIService must all be named")
	case c.Validity <= 0 || c.RenewBefore <= 0 || c.RenewBefore >= c.Validity:
		return fmt.Errorf("webhookcert: want 0 < renew-before (%s) < validity (%s)", c.RenewBefore, c.Validity)
	}
	return nil
}

// Keeper serves the current certificate and renews it.
type Keeper struct {
	cfg    Config
	client kubernetes.Interface
	cert   atomic.Pointer[tls.Certificate]
	now    func() time.Time
}

// New returns a Keeper; call Ensure before serving.
func New(cfg Config, client kubernetes.Interface) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Keeper{cfg: cfg, client: client, now: time.Now}, nil
}

// GetCertificate is for tls.Config.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := k.cert.Load()
	if c == nil {
		return nil, errors.New("webhookcert: no serving certificate yet")
	}
	return c, nil
}

// Run re-checks every interval until ctx ends, logging failures (the
// current certificate keeps serving).
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	component.Every(ctx, interval, func(ctx context.Context) {
		if err := k.Ensure(ctx); err != nil {
			k.cfg.Log.Error("renewing the webhook certificate", "err", err)
		}
	})
}

// Ensure makes sure the Secret holds a certificate valid for more than
// RenewBefore (creating or renewing it), serves it, and patches its CA into
// the webhook configuration.
func (k *Keeper) Ensure(ctx context.Context) error {
	secrets := k.client.CoreV1().Secrets(k.cfg.Namespace)
	s, err := secrets.Get(ctx, k.cfg.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s = nil
	case err != nil:
		return fmt.Errorf("reading secret %s/%s: %w", k.cfg.Namespace, k.cfg.Secret, err)
	}
	cert, caPEM, err := k.usable(s)
	if err != nil {
		k.cfg.Log.Info("issuing a new webhook certificate", "reason", err)
		data, gerr := generate(k.dnsName(), k.now(), k.cfg.Validity)
		if gerr != nil {
			return gerr
		}
		if s == nil {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Secret, Namespace: k.cfg.Namespace}, Type: corev1.SecretTypeTLS, Data: data}
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			s = s.DeepCopy()
			s.Data = data
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return k.Ensure(ctx) // another replica won: use its certificate
		}
		if err != nil {
			return fmt.Errorf("writing secret %s/%s: %w", k.cfg.Namespace, k.cfg.Secret, err)
		}
		if cert, caPEM, err = k.usable(s); err != nil {
			return fmt.Errorf("the certificate just issued is unusable: %w", err)
		}
	}
	k.cert.Store(cert)
	return k.patchCABundle(ctx, caPEM)
}

func (k *Keeper) dnsName() string { return k.cfg.Service + "." + k.cfg.Namespace + ".svc" }

// usable returns the Secret's certificate if it names the Service, chains
// to its CA and is valid for longer than RenewBefore.
func (k *Keeper) usable(s *corev1.Secret) (*tls.Certificate, []byte, error) {
	if s == nil {
		return nil, nil, errors.New("no secret yet")
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		return nil, nil, fmt.Errorf("secret holds no usable key pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return nil, nil, errors.New("secret has no CA certificate")
	}
	now := k.now()
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: k.dnsName(), Roots: roots, CurrentTime: now}); err != nil {
		return nil, nil, fmt.Errorf("certificate does not verify for %s: %w", k.dnsName(), err)
	}
	if leaf.NotAfter.Sub(now) < k.cfg.RenewBefore {
		return nil, nil, fmt.Errorf("certificate expires at %s, within %s", leaf.NotAfter, k.cfg.RenewBefore)
	}
	pair.Leaf = leaf
	return &pair, s.Data["ca.crt"], nil
}

// patchCABundle sets every webhook's caBundle to caPEM, if it differs.
func (k *Keeper) patchCABundle(ctx context.Context, caPEM []byte) error {
	if k.cfg.APIService != "" {
		return k.patchAPIService(ctx, caPEM)
	}
	api := k.client.AdmissionregistrationV1()
	if k.cfg.Validating {
		return patchCABundle(ctx, k, caPEM, "ValidatingWebhookConfiguration", api.ValidatingWebhookConfigurations(),
			func(w *admissionregistrationv1.ValidatingWebhookConfiguration) (string, [][]byte) {
				var b [][]byte
				for _, h := range w.Webhooks {
					b = append(b, h.ClientConfig.CABundle)
				}
				return w.ResourceVersion, b
			})
	}
	return patchCABundle(ctx, k, caPEM, "MutatingWebhookConfiguration", api.MutatingWebhookConfigurations(),
		func(w *admissionregistrationv1.MutatingWebhookConfiguration) (string, [][]byte) {
			var b [][]byte
			for _, h := range w.Webhooks {
				b = append(b, h.ClientConfig.CABundle)
			}
			return w.ResourceVersion, b
		})
}

// webhookAPI is the client of one kind of webhook configuration.
type webhookAPI[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// patchCABundle patches the caBundles of k's webhook configuration, of
// kind, that bundles reads.
func patchCABundle[T any](ctx context.Context, k *Keeper, caPEM []byte, kind string, api webhookAPI[T], bundles func(T) (string, [][]byte)) error {
	w, err := api.Get(ctx, k.cfg.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, k.cfg.WebhookConfig, err)
	}
	rv, current := bundles(w)
	var ops []map[string]any
	for i, b := range current {
		if !bytes.Equal(b, caPEM) {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": caPEM})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	// Guard against the list changing under us.
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": rv}}, ops...)
	raw, _ := json.Marshal(ops)
	if _, err := api.Patch(ctx, k.cfg.WebhookConfig, types.JSONPatchType, raw, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching the caBundle of %s %s: %w", kind, k.cfg.WebhookConfig, err)
	}
	k.cfg.Log.Info("webhook caBundle updated", "kind", kind, "webhookConfiguration", k.cfg.WebhookConfig, "webhooks", len(ops)-1)
	return nil
}

// generate makes a CA and a serving certificate for dnsName, as Secret data.
func generate(dnsName string, now time.Time, validity time.Duration) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
		return n
	}
	start := now.Add(-time.Hour) // clock skew between replicas and the API server
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "plexus webhook CA for " + dnsName},
		NotBefore: start, NotAfter: now.Add(validity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, MaxPathLenZero: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the webhook CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: start, NotAfter: now.Add(validity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
