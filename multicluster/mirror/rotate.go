package mirror

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// DefaultRenewAt is the fraction of a link token's lifetime after which
// the service mirror replaces it.
const DefaultRenewAt = 0.8

// linkToken is what the service mirror reads from a link's token (a
// service account token the linked cluster's TokenRequest API minted,
// bound to a Secret there: plexusctl multicluster link).
type linkToken struct {
	issued, expires time.Time
	namespace       string // of the service account
	account         string
	secret          string // the Secret it is bound to, and its UID
	secretUID       string
}

// parseLinkToken reads a kubeconfig's bearer token's claims; ok is false
// for credentials that are not a bound service account token (a static
// token, a client certificate), which are never renewed.
func parseLinkToken(kubeconfig []byte) (linkToken, bool) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil || cfg.Contexts[cfg.CurrentContext] == nil || cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo] == nil {
		return linkToken{}, false
	}
	parts := strings.Split(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token, ".")
	if len(parts) != 3 {
		return linkToken{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return linkToken{}, false
	}
	var claims struct {
		IssuedAt int64 `json:"iat"`
		Expiry   int64 `json:"exp"`
		K8s      struct {
			Namespace string `json:"namespace"`
			Secret    struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"secret"`
			ServiceAccount struct {
				Name string `json:"name"`
			} `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.IssuedAt == 0 || claims.Expiry <= claims.IssuedAt ||
		claims.K8s.Secret.Name == "" || claims.K8s.ServiceAccount.Name == "" {
		return linkToken{}, false
	}
	return linkToken{issued: time.Unix(claims.IssuedAt, 0), expires: time.Unix(claims.Expiry, 0), namespace: claims.K8s.Namespace,
		account: claims.K8s.ServiceAccount.Name, secret: claims.K8s.Secret.Name, secretUID: claims.K8s.Secret.UID}, true
}

// renewAt is when a token is replaced: renewAt of its lifetime.
func (t linkToken) renewAt(fraction float64) time.Time {
	return t.issued.Add(time.Duration(float64(t.expires.Sub(t.issued)) * fraction))
}

// renewCredentials replaces Link l's token (r's) with a new one of the
// same lifetime bound to the same Secret in the linked cluster (so
// unlink still revokes it), minted with the token itself, and writes it
// into the credentials Secret in place: destination and the mirror's own
// watch take the new Secret without a restart, the mirror's only once
// its new watch has synced.
func (c *Controller) renewCredentials(ctx context.Context, l *mc.Link, r *remote) error {
	tok := r.token
	seconds := int64(tok.expires.Sub(tok.issued) / time.Second)
	fresh, err := r.client.CoreV1().ServiceAccounts(tok.namespace).CreateToken(ctx, tok.account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: tok.secret, UID: types.UID(tok.secretUID)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("renewing the token of Link %s (TokenRequest for %s/%s in the linked cluster): %w", l.Name, tok.namespace, tok.account, err)
	}
	secrets := c.kube.CoreV1().Secrets(c.namespace)
	secret, err := secrets.Get(ctx, l.Spec.CredentialsSecret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cfg, err := clientcmd.Load(secret.Data[mc.CredentialsKey])
	if err != nil {
		return err
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if user == nil {
		return errors.New("the credentials' kubeconfig has no user")
	}
	user.Token = fresh.Status.Token
	if secret.Data[mc.CredentialsKey], err = clientcmd.Write(*cfg); err != nil {
		return err
	}
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing Link %s's renewed token into Secret %s/%s: %w", l.Name, c.namespace, secret.Name, err)
	}
	c.log.Info("link token renewed", "link", l.Name, "expires", fresh.Status.ExpirationTimestamp.UTC())
	return nil
}
