package identitycmd

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// GeneratedByAnnotation marks the issuer Secret and trust anchors
// ConfigMap that identity made itself (--generate-issuer).
const GeneratedByAnnotation = "plexus.dev/generated-by"

// errNotOurs: what is wrong is in an object identity did not make; retrying
// will not help.
var errNotOurs = errors.New("identity did not make it")

// generateTimeout bounds the retries of generation while the API server
// cannot be reached; after it the process fails and is restarted.
const generateTimeout = time.Minute

// GenerateIssuer makes a new trust anchor and issuer into the Secret
// namespace/secretName when there is none, and the trust anchors
// ConfigMap from the Secret's anchors when it is absent: a chart installed
// without identity values (ARCHITECTURE.md §11). Whatever exists is kept, so
// the anchors are made once and every upgrade and restart keeps them; of
// replicas racing, the first Create wins and the others read its Secret.
func GenerateIssuer(ctx context.Context, client kubernetes.Interface, namespace, secretName, trustDomain string, log *slog.Logger) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, generateTimeout, true, func(ctx context.Context) (bool, error) {
		lastErr = generateOnce(ctx, client, namespace, secretName, trustDomain, log)
		if lastErr != nil && (apierrors.IsForbidden(lastErr) || apierrors.IsInvalid(lastErr) || errors.Is(lastErr, errNotOurs)) {
			return false, lastErr // retrying will not help
		}
		if lastErr != nil {
			log.Warn("generating the issuer", "error", lastErr.Error())
		}
		return lastErr == nil, nil
	})
	if err != nil && lastErr != nil {
		err = lastErr
	}
	if err != nil {
		return fmt.Errorf("identity: --generate-issuer: %w", err)
	}
	return nil
}

func generateOnce(ctx context.Context, client kubernetes.Interface, namespace, secretName, trustDomain string, log *slog.Logger) error {
	secrets := client.CoreV1().Secrets(namespace)
	secret, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		secret, err = newIssuerSecret(namespace, secretName, trustDomain)
		if err != nil {
			return err
		}
		if _, err = secrets.Create(ctx, secret, metav1.CreateOptions{}); err == nil {
			log.Info("generated a trust anchor and issuer", "secret", namespace+"/"+secretName)
		} else if apierrors.IsAlreadyExists(err) {
			secret, err = secrets.Get(ctx, secretName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("issuer Secret %s/%s: %w", namespace, secretName, err)
	}
	anchors := secret.Data[identity.SecretAnchorsKey]
	if len(anchors) == 0 {
		return fmt.Errorf("issuer Secret %s/%s has no %s", namespace, secretName, identity.SecretAnchorsKey)
	}
	configMaps := client.CoreV1().ConfigMaps(namespace)
	cm, err := configMaps.Get(ctx, AnchorsConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: generatedMeta(namespace, AnchorsConfigMap),
			Data:       map[string]string{AnchorsBundleKey: string(anchors)},
		}
		if _, err = configMaps.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			err = nil
		}
	case err == nil && !bundles(cm.Data[AnchorsBundleKey], anchors):
		// The Secret was made again (deleted by hand, say) while the
		// ConfigMap stayed: proxies would trust anchors that no longer
		// sign anything. Ours is brought to the Secret; anyone else's is
		// not ours to change.
		if cm.Annotations[GeneratedByAnnotation] == "" {
			return fmt.Errorf("trust anchors ConfigMap %s/%s does not hold the anchors of the issuer Secret %s/%s, and %w: fix one of them",
				namespace, AnchorsConfigMap, namespace, secretName, errNotOurs)
		}
		cm.Data = map[string]string{AnchorsBundleKey: string(anchors)}
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil {
			log.Warn("the trust anchors ConfigMap did not hold the issuer Secret's anchors: replaced", "configmap", namespace+"/"+AnchorsConfigMap)
		}
	}
	if err != nil {
		return fmt.Errorf("trust anchors ConfigMap %s/%s: %w", namespace, AnchorsConfigMap, err)
	}
	return nil
}

// bundles reports whether the PEM bundle holds every certificate of
// anchors.
func bundles(bundle string, anchors []byte) bool {
	have, err := pki.ParseCerts([]byte(bundle))
	if err != nil {
		return false
	}
	want, err := pki.ParseCerts(anchors)
	if err != nil {
		return false
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, w.Equal) {
			return false
		}
	}
	return true
}

// newIssuerSecret makes an anchor and an issuer signed by it, with
// mesh/identity/pki's default lifetimes, as `plexusctl install` does.
func newIssuerSecret(namespace, name, trustDomain string) (*corev1.Secret, error) {
	anchor, issuer, err := pki.NewAnchorAndIssuer(trustDomain, time.Now())
	if err != nil {
		return nil, err
	}
	s, err := identity.IssuerSecret(namespace, name, []*x509.Certificate{anchor.Cert}, issuer)
	if err != nil {
		return nil, err
	}
	s.TypeMeta = metav1.TypeMeta{}
	s.ObjectMeta = generatedMeta(namespace, name)
	return s, nil
}

func generatedMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace:   namespace,
		Name:        name,
		Labels:      map[string]string{"app.kubernetes.io/name": "plexus-identity", "app.kubernetes.io/part-of": "plexus"},
		Annotations: map[string]string{GeneratedByAnnotation: "plexus-identity"},
	}
}
