// Package uninstall removes Plexus from a cluster in an order that never
// leaves a node's runtime calling a plugin that is half gone and never
// blocks pod creation: the node agent first, then plexus-cni on every node
// (the cleanup DaemonSet, waited for), then the webhooks, the control
// plane, RBAC, CRDs and, last, the namespace.
package uninstall

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/cli/install"
)

// Names of the node agent's DaemonSets (deploy/plexus-node,
// deploy/plexus-node-cleanup).
const (
	AgentDaemonSet   = "plexus-node"
	CleanupDaemonSet = "plexus-node-cleanup"
)

// DefaultTimeout bounds the node phase: the agent's pods going away and
// the cleanup DaemonSet becoming ready on every node.
const DefaultTimeout = 5 * time.Minute

// Config says how to uninstall.
type Config struct {
	// Install is what Plexus was installed with. Its image and CNI dirs
	// are used for the cleanup DaemonSet only when the node agent's
	// DaemonSet is already gone; otherwise the agent's own are.
	// NodeImageMode skips the node phase (the plugin is in the images).
	Install install.Config
	Timeout time.Duration
	// Delete deletes the rest through the API instead of printing it for
	// `kubectl delete -f -`.
	Delete bool
}

// Validate checks the config and fills in the default timeout.
func (c *Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("timeout %v is negative", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c.Install.Validate()
}

// Uninstaller removes Plexus. Its fields are what tests replace.
type Uninstaller struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Renderer names what install creates and renders the cleanup
	// DaemonSet; only its Manifests (deploy.Manifests) are used.
	Renderer install.Renderer
	// Progress gets one line per step (stderr).
	Progress io.Writer
	// Poll is how often waits look again (default 1s).
	Poll time.Duration
}

// Run removes plexus-cni from every node, then writes the remaining
// objects to out as YAML for `kubectl delete -f -` or, with cfg.Delete,
// deletes them. If a node is not clean in time it returns an error naming
// the node and touches nothing else.
func (u Uninstaller) Run(ctx context.Context, cfg Config, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if u.Poll <= 0 {
		u.Poll = time.Second
	}
	if !cfg.Install.NodeImageMode {
		if err := u.cleanNodes(ctx, cfg); err != nil {
			return err
		}
	}
	refs, err := u.remaining(ctx, cfg.Install)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		u.progress("nothing else of Plexus is left in the cluster")
		return nil
	}
	if !cfg.Delete {
		return printRefs(out, refs)
	}
	for _, r := range refs {
		if err := u.delete(ctx, r); err != nil {
			return err
		}
		u.progress("deleted %s", r)
	}
	return nil
}

func (u Uninstaller) progress(format string, a ...any) {
	if u.Progress != nil {
		fmt.Fprintf(u.Progress, format+"\n", a...)
	}
}

// remaining lists, in deletion order, the objects an install of any
// flavour (with or without --ha, the node agent, the cleanup DaemonSet)
// creates that exist in the cluster. The order is the reverse of the apply
// order: the webhook configurations first, so that pod creation never
// waits for an injector that is gone; the namespace last.
func (u Uninstaller) remaining(ctx context.Context, cfg install.Config) ([]install.Ref, error) {
	cfg.HA, cfg.NodeImageMode, cfg.CRDsOnly = true, false, false
	refs, err := u.Renderer.Inventory(cfg)
	if err != nil {
		return nil, err
	}
	slices.Reverse(refs)
	cleanup := install.Ref{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: install.Namespace, Name: CleanupDaemonSet}
	agent := slices.Index(refs, install.Ref{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: install.Namespace, Name: AgentDaemonSet})
	if agent < 0 {
		return nil, fmt.Errorf("the manifests have no DaemonSet %s/%s", install.Namespace, AgentDaemonSet)
	}
	refs = slices.Insert(refs, agent+1, cleanup)
	var exist []install.Ref
	for _, r := range refs {
		res, err := r.Resource()
		if err != nil {
			return nil, err
		}
		_, err = u.Dynamic.Resource(res).Namespace(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("looking for %s: %w", r, err)
		}
		exist = append(exist, r)
	}
	return exist, nil
}

func (u Uninstaller) delete(ctx context.Context, r install.Ref) error {
	res, err := r.Resource()
	if err != nil {
		return err
	}
	bg := metav1.DeletePropagationBackground
	err = u.Dynamic.Resource(res).Namespace(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", r, err)
	}
	return nil
}

// printRefs writes each object as a YAML document holding just what
// `kubectl delete -f -` needs.
func printRefs(w io.Writer, refs []install.Ref) error {
	var buf bytes.Buffer
	for i, r := range refs {
		meta := map[string]string{"name": r.Name}
		if r.Namespace != "" {
			meta["namespace"] = r.Namespace
		}
		b, err := yaml.Marshal(map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "metadata": meta})
		if err != nil {
			return fmt.Errorf("encoding %s: %w", r, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("writing the manifests: %w", err)
	}
	return nil
}
