// Package trust compares the trust anchors two linked clusters hand their
// proxies: the ConfigMap each install's injector reads (not a configured
// value), so that a Link between clusters whose proxies cannot verify
// each other is refused, and plexusctl multicluster check says why.
package trust

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// Where an install keeps the anchors its proxies hold.
const (
	Namespace = healthcheck.Namespace
	ConfigMap = identitycmd.AnchorsConfigMap
	BundleKey = identitycmd.AnchorsBundleKey
)

// Anchors reads the trust anchors of the cluster k reaches.
func Anchors(ctx context.Context, k kubernetes.Interface) ([]*x509.Certificate, error) {
	cm, err := k.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", Namespace, ConfigMap, err)
	}
	certs, err := pki.ParseCerts([]byte(cm.Data[BundleKey]))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", Namespace, ConfigMap, BundleKey, err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s holds no certificate", Namespace, ConfigMap, BundleKey)
	}
	return certs, nil
}

// Common reports whether the two bundles share an anchor (the same
// public key): during a rotation, overlapping bundles still do.
func Common(a, b []*x509.Certificate) bool {
	ours := fingerprints(a)
	for _, f := range fingerprints(b) {
		if slices.Contains(ours, f) {
			return true
		}
	}
	return false
}

// Describe names a bundle's anchors: subject and key fingerprint.
func Describe(certs []*x509.Certificate) string {
	var parts []string
	for i, f := range fingerprints(certs) {
		parts = append(parts, fmt.Sprintf("%q (key sha256 %s…)", certs[i].Subject.CommonName, f[:16]))
	}
	return strings.Join(parts, ", ")
}

// fingerprints are the SHA-256 of each certificate's public key.
func fingerprints(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
		out = append(out, hex.EncodeToString(sum[:]))
	}
	return out
}
