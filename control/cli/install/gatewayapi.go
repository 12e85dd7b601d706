package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// Gateway API CRDs: HTTPRoute and GRPCRoute of the standard channel,
// verbatim from sigs.k8s.io/gateway-api (deploy/crds/gateway-api).
const (
	gatewayAPIDir = "crds/gateway-api"
	// AnnotationBundleVersion and AnnotationChannel are set on the CRDs
	// of every Gateway API release.
	AnnotationBundleVersion = "gateway.networking.k8s.io/bundle-version"
	AnnotationChannel       = "gateway.networking.k8s.io/channel"
	// MinGatewayAPIVersion is the oldest Gateway API release Plexus works
	// with, in any channel: the first whose standard channel serves both
	// HTTPRoute (with timeouts) and GRPCRoute as v1.
	MinGatewayAPIVersion = "v1.2.0"
)

// CRDRelease is the Gateway API release of one CRD, from its annotations;
// both fields are empty on a CRD that carries none.
type CRDRelease struct {
	BundleVersion, Channel string
}

func (r CRDRelease) String() string { return r.BundleVersion + " (" + r.Channel + ")" }

// CRDDecision is what install does with one Gateway API CRD.
type CRDDecision struct {
	Render bool   // render Plexus's copy
	Fatal  bool   // Plexus cannot work with the installed CRD
	Note   string // one line for stderr; empty when there is nothing to say
}

// DecideGatewayCRD decides for the CRD of kind, of which Plexus ships
// ours, when the cluster holds installed (nil: none). ours must carry a
// semantic version. The rule: render ours when the CRD is absent, or
// older and of the same channel; otherwise never replace it, and fail
// only when it is from another channel and older than
// MinGatewayAPIVersion. A CRD without readable annotations is someone
// else's: kept, with a note.
func DecideGatewayCRD(kind string, ours CRDRelease, installed *CRDRelease) CRDDecision {
	if installed == nil {
		return CRDDecision{Render: true}
	}
	const (
		manage = "to let Plexus manage it, delete the CRD first (that deletes every %[1]s)"
		skip   = "pass --skip-gateway-api-crds to silence this"
	)
	have, err := version.ParseSemantic(installed.BundleVersion)
	if err != nil || installed.Channel == "" {
		return CRDDecision{Note: fmt.Sprintf("keeping the installed %[1]s CRD: it has no readable %[2]s and %[3]s annotations, so Plexus cannot tell its release and will not replace it; "+
			"Plexus needs %[1]s v1 as in Gateway API %[4]s or later; "+manage+", or "+skip,
			kind, AnnotationBundleVersion, AnnotationChannel, MinGatewayAPIVersion)}
	}
	want := version.MustParseSemantic(ours.BundleVersion)
	switch {
	case installed.Channel == ours.Channel && have.LessThan(want):
		return CRDDecision{Render: true, Note: fmt.Sprintf("upgrading the installed %s CRD from %s to Plexus's %s", kind, installed, ours)}
	case installed.Channel == ours.Channel && have.EqualTo(want):
		return CRDDecision{Note: fmt.Sprintf("keeping the installed %s CRD %s, the same as Plexus's", kind, installed)}
	case installed.Channel == ours.Channel:
		return CRDDecision{Note: fmt.Sprintf("keeping the installed %s CRD %s, newer than Plexus's %s", kind, installed, ours.BundleVersion)}
	case have.LessThan(version.MustParseSemantic(MinGatewayAPIVersion)):
		return CRDDecision{Fatal: true, Note: fmt.Sprintf("the installed %[1]s CRD %[2]s is older than the %[3]s Plexus needs, and Plexus never replaces a CRD of another channel: "+
			"upgrade it to %[3]s or later of its channel, or delete it (that deletes every %[1]s) to let Plexus install its %[4]s, or pass --skip-gateway-api-crds to install without it",
			kind, installed, MinGatewayAPIVersion, ours)}
	default:
		return CRDDecision{Note: fmt.Sprintf("keeping the installed %[1]s CRD %[2]s: Plexus never replaces a CRD of another channel, and works with any channel at %[3]s or later (it ships %[4]s); "+manage+", or "+skip,
			kind, installed, MinGatewayAPIVersion, ours)}
	}
}

// DecideUnreadCRDs decides for the Gateway API CRDs of kinds ("GRPCRoute
// and HTTPRoute"), of which Plexus ships ours, when looking them up failed
// with err. With no cluster configured at all (NoClusterConfigured: offline
// rendering, GitOps) ours are rendered, with a note that they were not
// checked against a cluster. With a cluster configured that could not be
// asked (unreachable, Forbidden, a timeout) nothing is rendered and install
// fails: rendering ours unchecked would let kubectl apply replace a newer
// or experimental-channel installation.
func DecideUnreadCRDs(kinds string, ours CRDRelease, err error) CRDDecision {
	if NoClusterConfigured(err) {
		return CRDDecision{Render: true, Note: fmt.Sprintf("could not read the installed Gateway API CRDs (%v): no cluster is configured (no kubeconfig, no in-cluster config), "+
			"so Plexus's %s CRDs %s are rendered without being checked against a cluster, and kubectl apply will replace any installed ones, newer or experimental-channel ones too; "+
			"pass --skip-gateway-api-crds to leave them out", err, kinds, ours)}
	}
	return CRDDecision{Fatal: true, Note: fmt.Sprintf("could not read the installed Gateway API CRDs from the cluster (%v), and Plexus will not render its %s CRDs %s unchecked: "+
		"kubectl apply could replace a newer or experimental-channel installation; fix access to the cluster (install needs get on %s) and run it again, "+
		"or pass --skip-gateway-api-crds to leave the Gateway API CRDs out", err, kinds, ours, crdResource.GroupResource())}
}

// NoClusterConfigured reports whether err, from a CRDLookup, says that no
// cluster is configured at all rather than that one could not be asked:
// client-go's empty configuration (no kubeconfig and no in-cluster
// config), or a kubeconfig file that does not exist, anywhere in err's
// chain.
func NoClusterConfigured(err error) bool {
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	for ; err != nil; err = errors.Unwrap(err) {
		if clientcmd.IsEmptyConfig(err) {
			return true
		}
	}
	return false
}

// CRDLookup returns the release of the named CRD in the cluster, nil
// (and no error) when there is no such CRD. Its error says that no
// cluster is configured when NoClusterConfigured holds for it.
type CRDLookup func(ctx context.Context, name string) (*CRDRelease, error)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ClusterCRDs looks CRDs up through the API server.
func ClusterCRDs(client dynamic.Interface) CRDLookup {
	return func(ctx context.Context, name string) (*CRDRelease, error) {
		crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", name, err)
		}
		a := crd.GetAnnotations()
		return &CRDRelease{BundleVersion: a[AnnotationBundleVersion], Channel: a[AnnotationChannel]}, nil
	}
}

// GatewayAPIPlan is what install does with the Gateway API CRDs.
type GatewayAPIPlan struct {
	Omit  []string // names of the CRDs to leave out (Config.OmitGatewayAPICRDs)
	Notes []string // lines for stderr, fatal ones included
	Err   error    // set when Plexus cannot work with an installed CRD, or a configured cluster could not be asked
}

// PlanGatewayAPI decides, with DecideGatewayCRD, for each Gateway API CRD
// in manifests (deploy.Manifests) against what lookup finds. When lookup
// fails, DecideUnreadCRDs decides for them all: rendered with a note when
// no cluster is configured; otherwise every one is left out and the plan
// fails.
func PlanGatewayAPI(ctx context.Context, manifests fs.FS, lookup CRDLookup) (GatewayAPIPlan, error) {
	objs, err := load(manifests, gatewayAPIDir)
	if err != nil {
		return GatewayAPIPlan{}, fmt.Errorf("install: %w", err)
	}
	crds := make([]gatewayCRD, len(objs))
	kinds := make([]string, len(objs))
	for i, o := range objs {
		if crds[i], err = parseGatewayCRD(o); err != nil {
			return GatewayAPIPlan{}, fmt.Errorf("install: %s: %w", describe(o), err)
		}
		kinds[i] = crds[i].kind
	}
	var plan GatewayAPIPlan
	for _, crd := range crds {
		installed, err := lookup(ctx, crd.name)
		if err != nil {
			d := DecideUnreadCRDs(strings.Join(kinds, " and "), crd.release, err)
			plan = GatewayAPIPlan{Notes: []string{d.Note}}
			if d.Fatal {
				for _, c := range crds {
					plan.Omit = append(plan.Omit, c.name)
				}
				plan.Err = errors.New("could not check the installed Gateway API CRDs (see above)")
			}
			return plan, nil
		}
		d := DecideGatewayCRD(crd.kind, crd.release, installed)
		if !d.Render {
			plan.Omit = append(plan.Omit, crd.name)
		}
		if d.Note != "" {
			plan.Notes = append(plan.Notes, d.Note)
		}
		if d.Fatal {
			plan.Err = errors.Join(plan.Err, fmt.Errorf("the installed %s CRD cannot serve Plexus (see above)", crd.kind))
		}
	}
	return plan, nil
}

// gatewayCRD is one Gateway API CRD that Plexus ships.
type gatewayCRD struct {
	name, kind string
	release    CRDRelease
}

// parseGatewayCRD reads a shipped CRD's name, kind and release, which must
// be a semantic version.
func parseGatewayCRD(o object) (gatewayCRD, error) {
	meta, _ := o["metadata"].(object)
	ann, _ := meta["annotations"].(object)
	names, _ := mapAt(o, "spec", "names")
	c := gatewayCRD{
		name:    str(meta["name"]),
		kind:    str(names["kind"]),
		release: CRDRelease{BundleVersion: str(ann[AnnotationBundleVersion]), Channel: str(ann[AnnotationChannel])},
	}
	if _, err := version.ParseSemantic(c.release.BundleVersion); err != nil || c.release.Channel == "" {
		return c, fmt.Errorf("no semantic %s and %s annotations", AnnotationBundleVersion, AnnotationChannel)
	}
	if c.name == "" || c.kind == "" {
		return c, errors.New("no name or spec.names.kind")
	}
	return c, nil
}

// gatewayAPIObjects returns the Gateway API CRDs cfg renders.
func (r Renderer) gatewayAPIObjects(cfg Config) ([]object, error) {
	if cfg.SkipGatewayAPICRDs {
		return nil, nil
	}
	crds, err := load(r.Manifests, gatewayAPIDir)
	if err != nil {
		return nil, err
	}
	var out []object
	var names []string
	for _, crd := range crds {
		meta, _ := crd["metadata"].(object)
		name := str(meta["name"])
		names = append(names, name)
		if !slices.Contains(cfg.OmitGatewayAPICRDs, name) {
			out = append(out, crd)
		}
	}
	for _, o := range cfg.OmitGatewayAPICRDs {
		if !slices.Contains(names, o) {
			return nil, fmt.Errorf("no Gateway API CRD %s to leave out (have %s)", o, strings.Join(names, ", "))
		}
	}
	return out, nil
}
