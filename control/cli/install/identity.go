package install

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/control/pki"
)

// Identity is the PEM material of the mesh's identity: the trust anchors,
// the issuer certificate (then any further intermediates) and its key.
type Identity struct {
	AnchorsPEM    []byte
	IssuerCertPEM []byte
	IssuerKeyPEM  []byte
}

// Generator creates a new trust anchor and an issuer signed by it.
type Generator func(trustDomain string, now time.Time) (Identity, error)

// GenerateIdentity is the production Generator: a self-signed ECDSA P-256
// anchor and an intermediate issuer signed by it, with control/pki's
// default lifetimes.
func GenerateIdentity(trustDomain string, now time.Time) (Identity, error) {
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: trustDomain, Now: now})
	if err != nil {
		return Identity{}, fmt.Errorf("creating the trust anchor: %w", err)
	}
	issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: trustDomain, Now: now})
	if err != nil {
		return Identity{}, fmt.Errorf("creating the issuer: %w", err)
	}
	key, err := pki.EncodeKey(issuer.Key)
	if err != nil {
		return Identity{}, fmt.Errorf("encoding the issuer key: %w", err)
	}
	return Identity{
		AnchorsPEM:    pki.EncodeCerts(anchor.Cert),
		IssuerCertPEM: pki.EncodeCerts(issuer.Cert),
		IssuerKeyPEM:  key,
	}, nil
}

// identity generates the material or reads it from cfg's files; files are
// checked: the issuer must be a CA whose key matches and that chains to
// the anchors now.
func (r Renderer) identity(cfg Config) (Identity, error) {
	now := r.Now()
	if cfg.TrustAnchorsFile == "" {
		id, err := r.Generate(cfg.TrustDomain, now)
		if err != nil {
			return Identity{}, fmt.Errorf("generating the identity issuer: %w", err)
		}
		return id, nil
	}
	var id Identity
	for _, f := range []struct {
		name string
		into *[]byte
	}{
		{cfg.TrustAnchorsFile, &id.AnchorsPEM},
		{cfg.IssuerCertificateFile, &id.IssuerCertPEM},
		{cfg.IssuerKeyFile, &id.IssuerKeyPEM},
	} {
		b, err := r.ReadFile(f.name)
		if err != nil {
			return Identity{}, fmt.Errorf("reading identity file: %w", err)
		}
		*f.into = b
	}
	if err := VerifyIdentity(id, now); err != nil {
		return Identity{}, fmt.Errorf("identity files %s, %s, %s: %w", cfg.TrustAnchorsFile, cfg.IssuerCertificateFile, cfg.IssuerKeyFile, err)
	}
	return id, nil
}

// VerifyIdentity checks that id's issuer is a CA holding its key and
// chains to id's anchors at now.
func VerifyIdentity(id Identity, now time.Time) error {
	anchors, err := pki.ParseCerts(id.AnchorsPEM)
	if err != nil {
		return fmt.Errorf("trust anchors: %w", err)
	}
	pool := x509.NewCertPool()
	for _, a := range anchors {
		pool.AddCert(a)
	}
	if _, err := pki.ParseIssuer(id.IssuerCertPEM, id.IssuerKeyPEM, pool, now); err != nil {
		return err
	}
	return nil
}

// identityObjects are the issuer Secret identity reads and the trust
// anchors ConfigMap the proxies and control plane mount.
func identityObjects(id Identity) []object {
	labels := object{"app.kubernetes.io/name": "plexus-identity", "app.kubernetes.io/part-of": "plexus"}
	b64 := base64.StdEncoding.EncodeToString
	return []object{
		{
			"apiVersion": "v1",
			"kind":       "Secret",
			"type":       string(corev1.SecretTypeTLS),
			"metadata":   object{"name": identity.DefaultSecretName, "namespace": Namespace, "labels": labels},
			"data": object{
				identity.SecretAnchorsKey: b64(id.AnchorsPEM),
				identity.SecretCertKey:    b64(id.IssuerCertPEM),
				identity.SecretKeyKey:     b64(id.IssuerKeyPEM),
			},
		},
		{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   object{"name": identitycmd.AnchorsConfigMap, "namespace": Namespace, "labels": labels},
			"data":       object{identitycmd.AnchorsBundleKey: string(id.AnchorsPEM)},
		},
	}
}
