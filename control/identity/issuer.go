package identity

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// secretVersion is what the loader needs of one version of the issuer Secret.
type secretVersion struct {
	data            map[string][]byte // shared with the informer cache: read only
	resourceVersion string
}

// Run watches the issuer Secret (a single-object informer: a field selector
// on its name) and loads every new version, until ctx ends. The informer's
// handler only records the newest version and wakes the loader; a version
// that does not load keeps the previous issuer in use.
func (s *Server) Run(ctx context.Context) error {
	ns, sel := s.cfg.Namespace, fields.OneTermEqualSelector("metadata.name", s.cfg.SecretName).String()
	secrets := s.client.CoreV1().Secrets(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return secrets.Watch(ctx, o)
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    s.onSecret,
			UpdateFunc: func(_, obj any) { s.onSecret(obj) },
			DeleteFunc: func(any) {
				s.log.Warn("issuer Secret deleted; keeping the loaded issuer", "secret", ns+"/"+s.cfg.SecretName)
			},
		},
	})
	go informer.RunWithContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			if v := s.pending.Swap(nil); v != nil {
				s.load(v)
			}
		}
	}
}

// onSecret is the informer handler: it never blocks.
func (s *Server) onSecret(obj any) {
	sec, ok := obj.(*corev1.Secret)
	if !ok || sec.Name != s.cfg.SecretName || sec.Namespace != s.cfg.Namespace {
		return
	}
	s.pending.Store(&secretVersion{data: sec.Data, resourceVersion: sec.ResourceVersion})
	select {
	case s.kick <- struct{}{}:
	default: // the loader is already due to run
	}
}

func (s *Server) load(v *secretVersion) {
	l, err := parseIssuerSecret(v, s.now)
	if err != nil {
		err = fmt.Errorf("Secret %s/%s version %s: %w", s.cfg.Namespace, s.cfg.SecretName, v.resourceVersion, err)
		s.loadErr.Store(&err)
		s.metrics.loadErrors.Inc()
		s.log.Error("issuer Secret refused; the previous issuer stays in use", "error", err)
		return
	}
	s.issuer.Store(l)
	s.loadErr.Store(nil)
	cert := l.issuer.Certificate()
	s.metrics.issuerExpiry.Set(float64(cert.NotAfter.Unix()))
	s.log.Info("issuer loaded", "secret", s.cfg.Namespace+"/"+s.cfg.SecretName, "version", v.resourceVersion,
		"issuer", cert.Subject.CommonName, "serial", cert.SerialNumber.Text(16), "not_after", cert.NotAfter)
	if _, err := s.servingCertificate(); err != nil {
		s.log.Error("issuing the serving certificate", "error", err)
	}
}

func parseIssuerSecret(v *secretVersion, now func() time.Time) (*loadedIssuer, error) {
	anchorCerts, err := pki.ParseCerts(v.data[SecretAnchorsKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SecretAnchorsKey, err)
	}
	anchors := x509.NewCertPool()
	for _, c := range anchorCerts {
		anchors.AddCert(c)
	}
	iss, err := pki.ParseIssuer(v.data[SecretCertKey], v.data[SecretKeyKey], anchors, now())
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", SecretCertKey, SecretKeyKey, err)
	}
	return &loadedIssuer{issuer: iss, anchors: anchors, resourceVersion: v.resourceVersion}, nil
}

// IssuerSecret returns the kubernetes.io/tls Secret the service loads its
// issuer from: anchors in ca.crt, the issuer certificate (then any further
// intermediates) in tls.crt, its key in tls.key.
func IssuerSecret(namespace, name string, anchors []*x509.Certificate, issuer pki.CA, intermediates ...*x509.Certificate) (*corev1.Secret, error) {
	key, err := pki.EncodeKey(issuer.Key)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			SecretAnchorsKey: pki.EncodeCerts(anchors...),
			SecretCertKey:    pki.EncodeCerts(append([]*x509.Certificate{issuer.Cert}, intermediates...)...),
			SecretKeyKey:     key,
		},
	}, nil
}
