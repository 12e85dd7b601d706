// Package upgrade moves a cluster's Plexus to this version of plexusctl:
// `plexusctl upgrade`. It reads the settings the running install was
// rendered with back from its objects (install.ReadConfig), applies the
// flags given over them, renders this version's objects with them and
// applies them (server-side apply), keeping the trust anchors and the
// issuer as they are: the identity Secret and the trust anchors ConfigMap
// are never applied or deleted. It then waits for the control plane and
// the node agent to roll (the agent's DaemonSet rolls one node at a time,
// and a replaced agent leaves the plugin in place: ARCHITECTURE.md §11), and
// last prunes the objects of the earlier version this one no longer ships:
// only kinds install renders, only labelled as Plexus's and rendered by
// install (Shipped), only in plexus-system or cluster-scoped, never a
// Secret, ConfigMap or CustomResourceDefinition. Objects of a version that
// did not label them so are never pruned.
//
// A cluster without Plexus, or with Plexus installed by Helm, is refused
// before anything changes.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/identitycmd"
)

// FieldManager is the server-side apply field manager of an upgrade:
// kubectl's, the manager of the documented install (plexusctl install |
// kubectl apply --server-side -f -), so that the fields a new version no
// longer sets are removed rather than left owned by the install.
const FieldManager = "kubectl"

// DefaultTimeout bounds the wait for the control plane and node agent to
// roll.
const DefaultTimeout = 5 * time.Minute

// ErrNotInstalled: the cluster has no Plexus to upgrade.
var ErrNotInstalled = errors.New("Plexus is not installed in this cluster")

// helmRelease is the annotation Helm puts on what it installs.
const helmRelease = "meta.helm.sh/release-name"

// Upgrader upgrades one cluster.
type Upgrader struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Renderer renders this version (its Generate is replaced by the
	// cluster's identity).
	Renderer install.Renderer
	// Progress receives one line per step.
	Progress io.Writer
}

// Installed reads the settings of the running install, or says why there
// is none to upgrade (ErrNotInstalled, or installed by Helm).
func (u Upgrader) Installed(ctx context.Context) (install.Config, error) {
	ns, err := u.Client.CoreV1().Namespaces().Get(ctx, install.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return install.Config{}, fmt.Errorf("%w: no namespace %s (install it with plexusctl install)", ErrNotInstalled, install.Namespace)
	} else if err != nil {
		return install.Config{}, fmt.Errorf("reading namespace %s: %w", install.Namespace, err)
	}
	var in install.Installed
	for name, into := range map[string]*map[string]any{"plexus-destination": &in.Destination, "plexus-injector": &in.Injector} {
		o, err := u.get(ctx, "apps/v1", "Deployment", name)
		if apierrors.IsNotFound(err) {
			return install.Config{}, fmt.Errorf("%w: no Deployment %s/%s (install it with plexusctl install)", ErrNotInstalled, install.Namespace, name)
		}
		if err != nil {
			return install.Config{}, err
		}
		if rel := (&unstructured.Unstructured{Object: o}).GetAnnotations()[helmRelease]; rel != "" {
			return install.Config{}, fmt.Errorf("Plexus was installed by Helm (release %s): upgrade it with helm upgrade", rel)
		}
		*into = o
	}
	o, err := u.get(ctx, "apps/v1", "DaemonSet", "plexus-node")
	switch {
	case err == nil:
		in.NodeAgent = o
	case !apierrors.IsNotFound(err):
		return install.Config{}, err
	case ns.Labels[podSecurityEnforce] != "restricted":
		// Installed with the node agent (the namespace allows its
		// hostPath), and the agent is gone: upgrading as if in node-image
		// mode would leave the nodes' plugin without its agent.
		return install.Config{}, fmt.Errorf("the node agent's DaemonSet %s/plexus-node is missing, but the install has one (namespace %s enforces Pod Security %q, not node-image mode's \"restricted\"): run plexusctl check, and install again to restore it",
			install.Namespace, install.Namespace, ns.Labels[podSecurityEnforce])
	}
	_, err = u.get(ctx, "policy/v1", "PodDisruptionBudget", "plexus-destination")
	switch {
	case err == nil:
		in.HA = true
	case !apierrors.IsNotFound(err):
		return install.Config{}, err
	}
	return install.ReadConfig(in)
}

const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// Check refuses the changes an upgrade cannot make in place: the trust
// domain (every proxy holds certificates of the installed one) and
// node-image mode (switching needs the nodes' plugin installed or removed:
// uninstall, then install).
func Check(installed, want install.Config) error {
	if want.TrustDomain != installed.TrustDomain {
		return fmt.Errorf("--trust-domain %s: the mesh's is %s, and every proxy holds certificates of it; a new trust domain needs a new install (uninstall, then install)", want.TrustDomain, installed.TrustDomain)
	}
	if want.NodeImageMode != installed.NodeImageMode {
		return fmt.Errorf("--node-image-mode=%t: the install's is %t; switching needs the nodes' plugin installed or removed (uninstall, then install)", want.NodeImageMode, installed.NodeImageMode)
	}
	return nil
}

// Run upgrades the cluster to cfg (the installed settings with the user's
// changes), waiting up to timeout for the rollout.
func (u Upgrader) Run(ctx context.Context, cfg install.Config, timeout time.Duration) error {
	id, err := u.identity(ctx)
	if err != nil {
		return err
	}
	r := u.Renderer
	r.Generate = func(string, time.Time) (install.Identity, error) { return id, nil }
	cfg.TrustAnchorsFile, cfg.IssuerCertificateFile, cfg.IssuerKeyFile = "", "", ""
	objs, err := r.Objects(cfg)
	if err != nil {
		return err
	}
	shipped := map[objectKey]bool{}
	var apply []map[string]any
	for _, o := range objs {
		ref := install.RefOf(o)
		shipped[keyOf(ref)] = true
		if !identityObject(ref) {
			apply = append(apply, o)
		}
	}
	// The API server checks every object first (a dry run), so that one it
	// refuses leaves the cluster as it was rather than half upgraded.
	for _, dryRun := range []bool{true, false} {
		for _, o := range apply {
			if err := u.apply(ctx, install.RefOf(o), o, dryRun); err != nil {
				return err
			}
		}
	}
	applied := len(apply)
	u.progress("applied %d objects", applied)
	if err := u.waitRollout(ctx, objs, timeout); err != nil {
		return err
	}
	return u.prune(ctx, shipped)
}

// objectKey names an object whatever its API version.
type objectKey struct{ group, kind, namespace, name string }

func keyOf(r install.Ref) objectKey {
	group, _, _ := strings.Cut(r.APIVersion, "/")
	if !strings.Contains(r.APIVersion, "/") {
		group = ""
	}
	return objectKey{group, r.Kind, r.Namespace, r.Name}
}

// identity reads the issuer Secret, which the upgrade keeps.
func (u Upgrader) identity(ctx context.Context) (install.Identity, error) {
	s, err := u.Client.CoreV1().Secrets(install.Namespace).Get(ctx, identity.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		return install.Identity{}, fmt.Errorf("reading the issuer Secret %s/%s: %w", install.Namespace, identity.DefaultSecretName, err)
	}
	return install.Identity{
		AnchorsPEM:    s.Data[identity.SecretAnchorsKey],
		IssuerCertPEM: s.Data[identity.SecretCertKey],
		IssuerKeyPEM:  s.Data[identity.SecretKeyKey],
	}, nil
}

// identityObject: the issuer Secret and trust anchors ConfigMap, which an
// upgrade neither applies nor deletes.
func identityObject(r install.Ref) bool {
	return r.Namespace == install.Namespace &&
		(r.Kind == "Secret" && r.Name == identity.DefaultSecretName || r.Kind == "ConfigMap" && r.Name == identitycmd.AnchorsConfigMap)
}

func (u Upgrader) get(ctx context.Context, apiVersion, kind, name string) (map[string]any, error) {
	ref := install.Ref{APIVersion: apiVersion, Kind: kind, Namespace: install.Namespace, Name: name}
	res, err := ref.Resource()
	if err != nil {
		return nil, err
	}
	o, err := u.Dynamic.Resource(res).Namespace(install.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	return o.Object, nil
}

func (u Upgrader) apply(ctx context.Context, ref install.Ref, o map[string]any, dryRun bool) error {
	res, err := ref.Resource()
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = u.Dynamic.Resource(res).Namespace(ref.Namespace).Apply(ctx, ref.Name, &unstructured.Unstructured{Object: o}, opts)
	switch {
	case err == nil:
		return nil
	case dryRun && apierrors.IsNotFound(err):
		return nil // a namespace or CRD this version adds: applied first for real
	case dryRun:
		return fmt.Errorf("the API server refuses %s: %w (nothing was changed)", ref, err)
	}
	return fmt.Errorf("applying %s: %w", ref, err)
}

// waitRollout waits for every Deployment, then the DaemonSet, to run
// this version's pods.
func (u Upgrader) waitRollout(ctx context.Context, objs []map[string]any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		for _, o := range objs {
			ref := install.RefOf(o)
			if ref.Kind != kind {
				continue
			}
			var last string
			err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
				done, state, err := u.rolled(ctx, ref)
				last = state
				return done, err
			})
			if err != nil {
				return fmt.Errorf("waiting for %s to roll out (%s): %w", ref, last, err)
			}
			u.progress("%s rolled out", ref)
		}
	}
	return nil
}

// rolled says whether ref's new pods are all up, and how far it is.
func (u Upgrader) rolled(ctx context.Context, ref install.Ref) (bool, string, error) {
	switch ref.Kind {
	case "Deployment":
		d, err := u.Client.AppsV1().Deployments(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		state := fmt.Sprintf("%d of %d updated, %d available, %d in all", s.UpdatedReplicas, want, s.AvailableReplicas, s.Replicas)
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want, state, nil
	default:
		ds, err := u.Client.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s := ds.Status
		state := fmt.Sprintf("%d of %d nodes updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
		return s.ObservedGeneration >= ds.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled, state, nil
	}
}

// prunable are the kinds an earlier version may have shipped that an
// upgrade deletes when this one does not: not Secrets or ConfigMaps (the
// control plane makes some itself), never CRDs (deleting one deletes every
// resource of its kind), nor the namespace.
var prunable = []install.Ref{
	{APIVersion: "v1", Kind: "ServiceAccount", Namespace: install.Namespace},
	{APIVersion: "v1", Kind: "Service", Namespace: install.Namespace},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role", Namespace: install.Namespace},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding", Namespace: install.Namespace},
	{APIVersion: "apps/v1", Kind: "Deployment", Namespace: install.Namespace},
	{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: install.Namespace},
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget", Namespace: install.Namespace},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
}

// Shipped selects what install rendered: Plexus's, and managed by
// install (not Helm, and not the optional objects users apply themselves,
// such as deploy/plexus-node-repair-delete).
const Shipped = "app.kubernetes.io/part-of=plexus," + install.ManagedBy + "=" + install.ManagedByInstall

// prune deletes what an earlier version shipped and this one does not.
func (u Upgrader) prune(ctx context.Context, shipped map[objectKey]bool) error {
	n := 0
	for _, kind := range prunable {
		res, err := kind.Resource()
		if err != nil {
			return err
		}
		list, err := u.Dynamic.Resource(res).Namespace(kind.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Shipped})
		if err != nil {
			return fmt.Errorf("listing %s to prune: %w", res.Resource, err)
		}
		for _, o := range list.Items {
			ref := install.Ref{APIVersion: kind.APIVersion, Kind: kind.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}
			if shipped[keyOf(ref)] || o.GetAnnotations()[helmRelease] != "" {
				continue
			}
			bg := metav1.DeletePropagationBackground
			err := u.Dynamic.Resource(res).Namespace(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("pruning %s: %w", ref, err)
			}
			u.progress("pruned %s (this version does not ship it)", ref)
			n++
		}
	}
	u.progress("upgrade done (%d objects pruned)", n)
	return nil
}

func (u Upgrader) progress(format string, a ...any) {
	if u.Progress != nil {
		fmt.Fprintf(u.Progress, "plexusctl upgrade: "+format+"\n", a...)
	}
}
