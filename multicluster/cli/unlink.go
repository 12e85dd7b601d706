package mccli

import (
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Unlinker undoes link: the Link (its mirrors go with it), the
// credentials Secret, and, given the remote cluster, the Secret the token
// is bound to, which revokes it. Every step is idempotent: a rerun
// finishes what an interrupted one began.
type Unlinker struct {
	Local   kubernetes.Interface
	Dynamic dynamic.Interface
	// Remote is the linked cluster; nil leaves its token valid until
	// it expires, and says so.
	Remote kubernetes.Interface
	// Wait is how long the Link may take to go (its finalizer waits for
	// the service mirror to delete its mirrors).
	Wait time.Duration
}

// Unlink removes the link to cluster, writing a line per step to w.
func (u Unlinker) Unlink(ctx context.Context, cluster string, w io.Writer) error {
	links := u.Dynamic.Resource(mc.LinkResource).Namespace(mc.Namespace)
	binding := ""
	link, err := links.Get(ctx, cluster, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(w, "Link %s/%s: already gone\n", mc.Namespace, cluster)
	case err != nil:
		return fmt.Errorf("reading Link %s/%s: %w", mc.Namespace, cluster, err)
	default:
		binding = link.GetAnnotations()[TokenBindingAnnotation]
		if err := links.Delete(ctx, cluster, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Link %s/%s: %w", mc.Namespace, cluster, err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, u.Wait, true, func(ctx context.Context) (bool, error) {
			_, err := links.Get(ctx, cluster, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			return fmt.Errorf("Link %s/%s is still there after %v: its finalizer waits for the service mirror (deployment %s/plexus-service-mirror) to delete its mirrors; run unlink again once it runs", mc.Namespace, cluster, u.Wait, mc.Namespace)
		}
		fmt.Fprintf(w, "Link %s/%s and its mirrors: deleted\n", mc.Namespace, cluster)
	}
	// The credentials Secret names the binding too, so a rerun after the
	// Link went still revokes the token; it goes last.
	secret := CredentialsSecretName(cluster)
	creds, err := u.Local.CoreV1().Secrets(mc.Namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s/%s: %w", mc.Namespace, secret, err)
	}
	if binding == "" && err == nil {
		binding = creds.Annotations[TokenBindingAnnotation]
	}
	switch {
	case binding == "":
		fmt.Fprintf(w, "no token binding is named (annotation %s): the token, if any, stays valid until it expires\n", TokenBindingAnnotation)
	case u.Remote == nil:
		fmt.Fprintf(w, "the token stays valid until it expires: delete Secret %s/%s in cluster %s (or pass --remote-kubeconfig) to revoke it\n", mc.Namespace, binding, cluster)
	default:
		if err := u.Remote.CoreV1().Secrets(mc.Namespace).Delete(ctx, binding, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the token's binding Secret %s/%s in cluster %s: %w", mc.Namespace, binding, cluster, err)
		}
		fmt.Fprintf(w, "Secret %s/%s in cluster %s: deleted (the token is revoked)\n", mc.Namespace, binding, cluster)
	}
	if err := u.Local.CoreV1().Secrets(mc.Namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Secret %s/%s: %w", mc.Namespace, secret, err)
	}
	fmt.Fprintf(w, "Secret %s/%s: deleted\n", mc.Namespace, secret)
	return nil
}
