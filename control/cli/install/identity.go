package install

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
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
// anchor and an intermediate issuer signed by it, with mesh/identity/pki's
// default lifetimes.
func GenerateIdentity(trustDomain string, now time.Time) (Identity, error) {
	anchor, issuer, err := pki.NewAnchorAndIssuer(trustDomain, now)
	if err != nil {
		return Identity{}, err
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
	if err := VerifyIdentity(id, cfg.TrustDomain, now); err != nil {
		return Identity{}, fmt.Errorf("identity files %s, %s, %s: %w", cfg.TrustAnchorsFile, cfg.IssuerCertificateFile, cfg.IssuerKeyFile, err)
	}
	return id, nil
}

// VerifyIdentity checks that id's issuer is a CA holding its key, chains
// to id's anchors at now, and may sign identities of trust domain td.
func VerifyIdentity(id Identity, td string, now time.Time) error {
	anchors, err := pki.ParseCerts(id.AnchorsPEM)
	if err != nil {
		return fmt.Errorf("trust anchors: %w", err)
	}
	pool := x509.NewCertPool()
	for _, a := range anchors {
		pool.AddCert(a)
	}
	iss, err := pki.ParseIssuer(id.IssuerCertPEM, id.IssuerKeyPEM, pool, now)
	if err != nil {
		return err
	}
	return pki.CheckTrustDomain(iss.Chain(), td)
}

// identityObjects are the issuer Secret identity reads and the trust
// anchors ConfigMap the proxies and control plane mount.
func identityObjects(id Identity) []object {
	b64 := base64.StdEncoding.EncodeToString
	return identityObjectsOf(b64(id.AnchorsPEM), b64(id.IssuerCertPEM), b64(id.IssuerKeyPEM), string(id.AnchorsPEM))
}

// identityObjectsOf are identityObjects from the Secret's base64 data and
// the ConfigMap's PEM (the charts give template expressions).
func identityObjectsOf(anchorsB64, certB64, keyB64, anchorsPEM string) []object {
	return []object{
		{
			"apiVersion": "v1",
			"kind":       "Secret",
			"type":       string(corev1.SecretTypeTLS),
			"metadata":   object{"name": identity.DefaultSecretName, "namespace": Namespace, "labels": identityLabels()},
			"data": object{
				identity.SecretAnchorsKey: anchorsB64,
				identity.SecretCertKey:    certB64,
				identity.SecretKeyKey:     keyB64,
			},
		},
		{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   object{"name": identitycmd.AnchorsConfigMap, "namespace": Namespace, "labels": identityLabels()},
			"data":       object{identitycmd.AnchorsBundleKey: anchorsPEM},
		},
	}
}

func identityLabels() object {
	return object{"app.kubernetes.io/name": "plexus-identity", "app.kubernetes.io/part-of": "plexus"}
}

// issuerGenerationRBAC lets identity create the issuer Secret and the
// trust anchors ConfigMap when a chart was installed without them
// (GenerateIssuerFlag). Kubernetes cannot limit create to a name; the Role
// is rendered only then.
func issuerGenerationRBAC() []object {
	const name = "plexus-identity-generate-issuer"
	meta := func() object {
		return object{"name": name, "namespace": Namespace, "labels": identityLabels()}
	}
	return []object{
		{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "Role",
			"metadata":   meta(),
			"rules": []any{
				object{"apiGroups": []any{""}, "resources": []any{"secrets", "configmaps"}, "verbs": []any{"create"}},
				object{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{identitycmd.AnchorsConfigMap}, "verbs": []any{"get", "update"}},
			},
		},
		{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "RoleBinding",
			"metadata":   meta(),
			"roleRef":    object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
			"subjects":   []any{object{"kind": "ServiceAccount", "name": identity.DefaultServiceAccount, "namespace": Namespace}},
		},
	}
}
