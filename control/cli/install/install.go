// Package install renders Plexus's manifests from deploy/ as one
// multi-document YAML stream for `kubectl apply -f -`, with the identity
// issuer and trust anchors, the trust and cluster domains, CNI directories,
// images, node-image mode and HA applied.
//
// The Gateway API CRDs Plexus needs (HTTPRoute and GRPCRoute, standard
// channel, verbatim from sigs.k8s.io/gateway-api) are shared with other
// controllers, so install never replaces one blindly. PlanGatewayAPI reads
// what the cluster has (annotations gateway.networking.k8s.io/bundle-version
// and …/channel) and DecideGatewayCRD rules, per CRD:
//
//   - absent: render ours;
//   - same channel, older release: render ours (an upgrade);
//   - same channel, same or newer release: leave it out, say so;
//   - another channel (experimental, say), at MinGatewayAPIVersion or
//     later: leave it out, say which release is installed and how to hand
//     it to Plexus (delete it first) or silence the note
//     (--skip-gateway-api-crds);
//   - another channel, older than MinGatewayAPIVersion: leave it out and
//     fail, since Plexus cannot work with it and must not replace it;
//   - no readable annotations (someone else's CRD): leave it out, say so.
//
// When the lookup fails, DecideUnreadCRDs rules for them all:
//
//   - no cluster configured at all (no kubeconfig, no in-cluster config:
//     offline rendering, GitOps): render ours, saying on stderr that they
//     were not checked against a cluster;
//   - a cluster configured that could not be asked (unreachable,
//     Forbidden, a timeout, an unusable kubeconfig): render nothing and
//     fail, naming the error and the ways forward (fix access: install
//     needs get on customresourcedefinitions.apiextensions.k8s.io; or
//     --skip-gateway-api-crds), since ours rendered unchecked could replace
//     a newer or experimental-channel installation.
//
// --skip-gateway-api-crds leaves them out without asking.
// Inventory never names them, so an uninstall never deletes them (and
// every route with them).
package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Namespace is the control plane's namespace (ARCHITECTURE.md §2).
const Namespace = "plexus-system"

// Defaults, as written in deploy/.
const (
	DefaultClusterDomain = "cluster.local"
	DefaultCNIBinDir     = "/opt/cni/bin"
	DefaultCNIConfDir    = "/etc/cni/net.d"
	DefaultImageRegistry = "plexus.dev"
	DefaultVersion       = "dev"
	// HAReplicas is the replica count of each control-plane Deployment
	// with --ha.
	HAReplicas = 3
)

// Config says what to render.
type Config struct {
	TrustDomain   string
	ClusterDomain string
	CNIBinDir     string // host path of the CNI binaries
	CNIConfDir    string // host path of the CNI configuration
	// NodeImageMode leaves out the DaemonSet and everything only it uses:
	// the plugin is baked into the node images (daemonset/README.md).
	NodeImageMode bool
	// HA runs HAReplicas of each control-plane Deployment, spread over
	// nodes, each with a PodDisruptionBudget.
	HA            bool
	ImageRegistry string // replaces "plexus.dev" in every image reference
	Version       string // the tag of every image, and the proxy version
	// CRDsOnly renders only the CustomResourceDefinitions.
	CRDsOnly bool
	// SkipGatewayAPICRDs leaves out the Gateway API CRDs;
	// OmitGatewayAPICRDs leaves out those named (GatewayAPIPlan.Omit).
	SkipGatewayAPICRDs bool
	OmitGatewayAPICRDs []string
	// DefaultInboundPolicy is the cluster-wide default inbound policy
	// (ARCHITECTURE.md §9); a namespace or pod annotation overrides it.
	DefaultInboundPolicy string
	// ClusterNetworks are the pod and service networks the cluster-*
	// default policies admit, comma-separated CIDRs.
	ClusterNetworks string
	// Identity files (PEM); all three or none. None means a new trust
	// anchor and issuer are generated.
	TrustAnchorsFile      string
	IssuerCertificateFile string
	IssuerKeyFile         string
}

// DefaultConfig renders deploy/ as written.
func DefaultConfig() Config {
	return Config{
		TrustDomain:   spiffe.DefaultTrustDomain,
		ClusterDomain: DefaultClusterDomain,
		CNIBinDir:     DefaultCNIBinDir,
		CNIConfDir:    DefaultCNIConfDir,
		ImageRegistry: DefaultImageRegistry,
		Version:       DefaultVersion,

		DefaultInboundPolicy: string(policyv1alpha1.AllUnauthenticated),
		ClusterNetworks:      DefaultClusterNetworks,
	}
}

// DefaultClusterNetworks are Linkerd's clusterNetworks default: the
// private ranges.
const DefaultClusterNetworks = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8"

// Validate reports the first setting that cannot be rendered.
func (c Config) Validate() error {
	if err := ValidDomain("trust domain", c.TrustDomain); err != nil {
		return err
	}
	if err := ValidDomain("cluster domain", c.ClusterDomain); err != nil {
		return err
	}
	for _, d := range []struct{ name, dir string }{{"CNI bin dir", c.CNIBinDir}, {"CNI conf dir", c.CNIConfDir}} {
		if !path.IsAbs(d.dir) || path.Clean(d.dir) != d.dir || d.dir == "/" {
			return fmt.Errorf("%s %q: want a clean absolute host path other than /", d.name, d.dir)
		}
	}
	if c.ImageRegistry == "" || strings.ContainsAny(c.ImageRegistry, " @") || strings.HasSuffix(c.ImageRegistry, "/") {
		return fmt.Errorf("image registry %q is not a registry/repository prefix (no spaces, no @, no trailing /)", c.ImageRegistry)
	}
	if !validTag(c.Version) {
		return fmt.Errorf("version %q is not a valid image tag", c.Version)
	}
	if !slices.Contains(policyv1alpha1.AccessPolicies(), policyv1alpha1.AccessPolicy(c.DefaultInboundPolicy)) {
		return fmt.Errorf("default inbound policy %q: want one of %v", c.DefaultInboundPolicy, policyv1alpha1.AccessPolicies())
	}
	for _, n := range strings.Split(c.ClusterNetworks, ",") {
		if _, err := netip.ParsePrefix(strings.TrimSpace(n)); err != nil {
			return fmt.Errorf("cluster networks %q: %q is not a CIDR", c.ClusterNetworks, n)
		}
	}
	n := 0
	for _, f := range []string{c.TrustAnchorsFile, c.IssuerCertificateFile, c.IssuerKeyFile} {
		if f != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		return errors.New("the identity trust anchors, issuer certificate and issuer key files go together: give all three or none")
	}
	return nil
}

// ValidDomain checks that d, named what in its error, is a lowercase DNS
// name (a trust or cluster domain).
func ValidDomain(what, d string) error {
	if d == "" || len(d) > 253 || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") {
		return fmt.Errorf("%s %q is not a DNS name", what, d)
	}
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("%s %q is not a lowercase DNS name", what, d)
		}
	}
	return nil
}

func validTag(t string) bool {
	if t == "" || len(t) > 128 || t[0] == '.' || t[0] == '-' {
		return false
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// Renderer renders manifests. Its fields are what tests replace.
type Renderer struct {
	// Manifests is deploy.Manifests: crds/, plexus-control/ and
	// plexus-node/, each holding *.yaml.
	Manifests fs.FS
	// Generate makes a new trust anchor and issuer; GenerateIdentity in
	// production.
	Generate Generator
	// Now is the clock for generation and for checking given files.
	Now func() time.Time
	// ReadFile reads the identity files; os.ReadFile in production.
	ReadFile func(string) ([]byte, error)
}

// object is one Kubernetes object as generic JSON-like maps, so that
// every field of deploy/ passes through untouched.
type object = map[string]any

// Render writes cfg's manifests to w as multi-document YAML.
func (r Renderer) Render(cfg Config, w io.Writer) error {
	objs, err := r.Objects(cfg)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("install: encoding %s: %w", describe(o), err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("install: writing the manifests: %w", err)
	}
	return nil
}

// Objects returns what Render writes, as objects in apply order.
func (r Renderer) Objects(cfg Config) ([]map[string]any, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	var id Identity
	if !cfg.CRDsOnly {
		var err error
		if id, err = r.identity(cfg); err != nil {
			return nil, fmt.Errorf("install: %w", err)
		}
	}
	objs, err := r.objects(cfg, id)
	if err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	return objs, nil
}

// Ref names one object.
type Ref struct {
	APIVersion, Kind, Namespace, Name string
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Inventory names every object Render writes for cfg, in apply order,
// without making or reading the identity (uninstall needs only names).
// It leaves out the Gateway API CRDs: they are shared with other
// controllers, and deleting one deletes every route of its kind.
func (r Renderer) Inventory(cfg Config) ([]Ref, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	cfg.SkipGatewayAPICRDs = true
	objs, err := r.objects(cfg, Identity{})
	if err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	refs := make([]Ref, len(objs))
	for i, o := range objs {
		refs[i] = RefOf(o)
	}
	return refs, nil
}

// NodeCleanup renders deploy/plexus-node-cleanup for cfg: the DaemonSet
// that runs `plexus-node uninstall` on every node, with cfg's images and
// CNI dirs applied as to the node agent's.
func (r Renderer) NodeCleanup(cfg Config) (map[string]any, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	objs, err := load(r.Manifests, "plexus-node-cleanup")
	if err != nil {
		return nil, fmt.Errorf("install: %w", err)
	}
	if len(objs) != 1 || kind(objs[0]) != "DaemonSet" {
		return nil, fmt.Errorf("install: plexus-node-cleanup holds %d objects, want one DaemonSet", len(objs))
	}
	if err := customize(objs[0], cfg); err != nil {
		return nil, fmt.Errorf("install: %s: %w", describe(objs[0]), err)
	}
	return objs[0], nil
}

// objects returns the rendered objects in apply order, with id as the
// identity issuer.
func (r Renderer) objects(cfg Config, id Identity) ([]object, error) {
	crds, err := load(r.Manifests, "crds")
	if err != nil {
		return nil, err
	}
	gateway, err := r.gatewayAPIObjects(cfg)
	if err != nil {
		return nil, err
	}
	crds = append(crds, gateway...)
	if cfg.CRDsOnly {
		return crds, nil
	}
	control, err := load(r.Manifests, "plexus-control")
	if err != nil {
		return nil, err
	}
	var node []object
	if !cfg.NodeImageMode {
		if node, err = load(r.Manifests, "plexus-node"); err != nil {
			return nil, err
		}
	}
	objs := []object{namespace(cfg)}
	objs = append(objs, crds...)
	objs = append(objs, identityObjects(id)...)
	objs = append(objs, control...)
	objs = append(objs, node...)
	for _, o := range append(control, node...) {
		if err := customize(o, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", describe(o), err)
		}
	}
	if cfg.HA {
		for _, o := range control {
			if kind(o) != "Deployment" {
				continue
			}
			pdb, err := makeHA(o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", describe(o), err)
			}
			objs = append(objs, pdb)
		}
	}
	for _, o := range objs {
		if !isGatewayAPICRD(o) {
			markManaged(o, ManagedByInstall)
		}
	}
	sort.SliceStable(objs, func(i, j int) bool { return rank(objs[i]) < rank(objs[j]) })
	return objs, nil
}

// ManagedBy is the label that says which tool rendered an object: install
// (ManagedByInstall) or Helm. An upgrade prunes only install's.
const (
	ManagedBy        = "app.kubernetes.io/managed-by"
	ManagedByInstall = "plexusctl"
)
