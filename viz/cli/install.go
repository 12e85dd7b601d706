package vizcli

import (
	"io"
	"io/fs"

	"github.com/plexus-mesh/plexus/control/cli/extension"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

// object is one Kubernetes object as generic maps.
type object = extension.Object

// Renderer renders the extension from Manifests (deploy.Manifests:
// plexus-viz/*.yaml).
//
// The tap service keeps its own serving certificate (Secret
// plexus-tap-tls) and writes its CA into the APIService's caBundle, as the
// injector does for its webhook (control/webhookcert): install renders
// neither, so applying the manifests again never replaces the certificate
// the running service holds.
type Renderer struct {
	Manifests fs.FS
	// TrustDomain is the mesh's (install --trust-domain); "" leaves the
	// manifests' default, cluster.local. The tap service verifies the
	// proxies' identities in it and names peers of any other as a linked
	// cluster's.
	TrustDomain string
}

func (r Renderer) manifests() extension.Manifests {
	m := extension.Manifests{FS: r.Manifests, Dir: viznames.ManifestDir, Namespace: viznames.Namespace}
	if r.TrustDomain != "" {
		m.Args = map[string]string{"--trust-domain": r.TrustDomain}
	}
	return m
}

// Install writes every object of the extension as multi-document YAML for
// kubectl apply -f -: the Namespace first and the APIService last, so that
// the API server routes to the tap service only once it is there.
func (r Renderer) Install(w io.Writer) error { return r.manifests().Install(w) }

// Uninstall writes what kubectl delete -f - must delete, in order: the
// APIService first, then the namespace with everything in it, then the
// objects outside it (cluster roles and bindings, the role bindings in
// kube-system and plexus-system), each as its apiVersion, kind and name
// alone.
func (r Renderer) Uninstall(w io.Writer) error { return r.manifests().Uninstall(w) }

func write(w io.Writer, objs []object) error { return extension.Write(w, objs) }
