// Package mccli is the multicluster extension's command line logic:
// install (the manifests), allow (a linked cluster's account for one
// link), link (credentials minted by the linked cluster's TokenRequest
// API, and the Link), unlink (everything link made) and check (the
// Links' state and the anchors both clusters use).
// multicluster/cli/mccmd turns it into plexusctl multicluster.
package mccli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/plexus-mesh/plexus/control/cli/extension"
	"github.com/plexus-mesh/plexus/control/cli/install"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Names link and unlink agree on.
const (
	// RemoteAccessAccount is the service account a linked cluster's
	// credentials are minted for (deploy/plexus-multicluster/remote-access.yaml).
	RemoteAccessAccount = "plexus-mc-remote-access"
	// TokenBindingAnnotation on a Link and its credentials Secret names
	// the Secret, in the linked cluster, the token is bound to: deleting
	// it revokes the token.
	TokenBindingAnnotation = "multicluster.plexus.dev/token-binding"
	// DefaultTokenLifetime is how long link's token lives; the service
	// mirror renews it in place before it expires
	// (multicluster/mirror: --token-renew-at).
	DefaultTokenLifetime = 24 * time.Hour
)

// CredentialsSecretName is the credentials Secret of cluster name.
func CredentialsSecretName(cluster string) string { return "cluster-credentials-" + cluster }

// LinkOptions say how to link to a cluster.
type LinkOptions struct {
	// ClusterName is what the linking cluster calls it.
	ClusterName string
	// APIServer is its API server's address as the linking cluster's
	// pods reach it; empty: the kubeconfig's.
	APIServer string
	// TokenLifetime is the token's lifetime.
	TokenLifetime time.Duration
	// GatewayAddress is ip:port of its gateway as the linking cluster's
	// pods reach it; empty: found from the gateway's Service (gateway.go).
	GatewayAddress string
	// ServiceAccount is the account the token is minted for: one Allow
	// made for this link; empty: RemoteAccessAccount, shared by every
	// link to the cluster.
	ServiceAccount string
}

// account is the service account the link's token is minted for.
func (o LinkOptions) account() string {
	if o.ServiceAccount != "" {
		return o.ServiceAccount
	}
	return RemoteAccessAccount
}

// Validate reports every problem with o.
func (o LinkOptions) Validate() error {
	var errs []error
	if o.ClusterName == "" {
		errs = append(errs, errors.New("--cluster-name is required"))
	} else if msgs := validation.IsDNS1123Label(o.ClusterName); len(msgs) > 0 || len(o.ClusterName) > mc.MaxClusterNameLength {
		errs = append(errs, fmt.Errorf("--cluster-name %q: want a DNS label of at most %d characters (mirrors are <service>-<cluster>)", o.ClusterName, mc.MaxClusterNameLength))
	}
	if o.GatewayAddress != "" {
		if _, err := netip.ParseAddrPort(o.GatewayAddress); err != nil {
			errs = append(errs, fmt.Errorf("--gateway-address %q: want ip:port", o.GatewayAddress))
		}
	}
	if o.ServiceAccount != "" {
		if msgs := validation.IsDNS1123Subdomain(o.ServiceAccount); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--service-account-name %q: want a DNS subdomain name", o.ServiceAccount))
		}
	}
	if o.TokenLifetime < 10*time.Minute {
		errs = append(errs, fmt.Errorf("--token-lifetime %v: want at least 10m (the API server's minimum)", o.TokenLifetime))
	}
	return errors.Join(errs...)
}

// Linker mints a link to the cluster it is connected to (the remote).
type Linker struct {
	Remote kubernetes.Interface
	// Config is the remote's client configuration: its CA goes into the
	// credentials.
	Config *rest.Config
	// Installed reads the remote's Plexus settings (upgrade.Upgrader's
	// Installed).
	Installed func(context.Context) (install.Config, error)
}

// Link creates, in the remote cluster, a Secret its token is bound to and
// a token of o's account (RemoteAccessAccount unless Allow made one), and writes the credentials Secret and
// the Link to apply in the linking cluster. Nothing is created in the
// remote when its settings cannot be read.
func (l Linker) Link(ctx context.Context, o LinkOptions, w io.Writer) error {
	account := o.account()
	if _, err := l.Remote.CoreV1().ServiceAccounts(mc.Namespace).Get(ctx, account, metav1.GetOptions{}); err != nil {
		hint := "install the extension there first: plexusctl multicluster install | kubectl apply -f -"
		if account != RemoteAccessAccount {
			hint = "allow it there first: plexusctl multicluster allow --service-account-name " + account + " | kubectl apply -f -"
		}
		return fmt.Errorf("service account %s/%s in the cluster to link: %w (%s)", mc.Namespace, account, err, hint)
	}
	cfg, err := l.Installed(ctx)
	if err != nil {
		return fmt.Errorf("reading the Plexus install of the cluster to link: %w", err)
	}
	ca, err := caData(l.Config)
	if err != nil {
		return err
	}
	server := o.APIServer
	if server == "" {
		server = l.Config.Host
	}
	gateway := o.GatewayAddress
	if gateway == "" {
		if gateway, err = gatewayAddress(ctx, l.Remote); err != nil {
			return err
		}
	}
	binding := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "plexus-mc-link-" + o.ClusterName + "-" + randSuffix(),
		Labels: map[string]string{mc.ClusterNameLabel: o.ClusterName}}}
	if binding, err = l.Remote.CoreV1().Secrets(mc.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the token's binding Secret: %w", err)
	}
	seconds := int64(o.TokenLifetime / time.Second)
	tok, err := l.Remote.CoreV1().ServiceAccounts(mc.Namespace).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		_ = l.Remote.CoreV1().Secrets(mc.Namespace).Delete(ctx, binding.Name, metav1.DeleteOptions{})
		return fmt.Errorf("TokenRequest for %s/%s: %w", mc.Namespace, account, err)
	}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{o.ClusterName: {Server: server, CertificateAuthorityData: ca, TLSServerName: l.Config.TLSClientConfig.ServerName}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{account: {Token: tok.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{o.ClusterName: {Cluster: o.ClusterName, AuthInfo: account}},
		CurrentContext: o.ClusterName,
	})
	if err != nil {
		return err
	}
	secret := extension.Object{
		"apiVersion": "v1", "kind": "Secret", "type": mc.CredentialsSecretType,
		"metadata": extension.Object{"name": CredentialsSecretName(o.ClusterName), "namespace": mc.Namespace,
			"labels":      extension.Object{mc.ClusterNameLabel: o.ClusterName},
			"annotations": extension.Object{mc.TrustDomainAnnotation: cfg.TrustDomain, TokenBindingAnnotation: binding.Name}},
		"data": extension.Object{mc.CredentialsKey: kubeconfig},
	}
	link := extension.Object{
		"apiVersion": mc.APIVersion, "kind": mc.LinkKind,
		"metadata": extension.Object{"name": o.ClusterName, "namespace": mc.Namespace,
			"annotations": extension.Object{TokenBindingAnnotation: binding.Name}},
		"spec": extension.Object{"clusterName": o.ClusterName, "credentialsSecret": CredentialsSecretName(o.ClusterName)},
	}
	via := "no gateway: Services exported in gateway mode get no endpoints"
	if gateway != "" {
		secret["metadata"].(extension.Object)["annotations"].(extension.Object)[mc.GatewayAddressAnnotation] = gateway
		via = "gateway " + gateway
	}
	header := fmt.Sprintf("# Link to cluster %s (trust domain %s) at %s, %s: apply in the linking cluster.\n# Its token expires %s; the service mirror renews it before then, and\n# plexusctl multicluster unlink revokes it.\n",
		o.ClusterName, cfg.TrustDomain, server, via, tok.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	return extension.Write(w, []extension.Object{secret, link})
}

// caData is the CA the client configuration trusts, as PEM.
func caData(c *rest.Config) ([]byte, error) {
	switch {
	case len(c.TLSClientConfig.CAData) > 0:
		return c.TLSClientConfig.CAData, nil
	case c.TLSClientConfig.CAFile != "":
		b, err := os.ReadFile(c.TLSClientConfig.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the kubeconfig's CA: %w", err)
		}
		return b, nil
	case c.TLSClientConfig.Insecure:
		return nil, errors.New("the kubeconfig skips TLS verification: link needs the API server's CA to give the linking cluster")
	}
	return nil, nil // the system's roots
}

func randSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
