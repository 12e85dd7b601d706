package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/deploy"
)

// installedCluster is a cluster after `plexusctl install` with cfg (and
// edit applied to every object), as fake clients.
func installedCluster(t *testing.T, cfg install.Config, edit func(*unstructured.Unstructured)) Upgrader {
	t.Helper()
	r := install.Renderer{Manifests: deploy.Manifests, Generate: install.GenerateIdentity, Now: time.Now}
	objs, err := r.Objects(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var dyn []runtime.Object
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(u)
		}
		dyn = append(dyn, u)
	}
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace}})
	return Upgrader{Client: client, Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), dyn...), Renderer: r}
}

// TestInstalledReadsTheSettings: the settings an upgrade starts from are
// those the cluster was installed with.
func TestInstalledReadsTheSettings(t *testing.T) {
	cfg := install.DefaultConfig()
	cfg.HA = true
	cfg.CNIBinDir, cfg.CNIConfDir = "/var/lib/cni/bin", "/var/lib/cni/net.d"
	cfg.TrustDomain = "mesh.example.org"
	cfg.ImageRegistry, cfg.Version = "registry.example.org/plexus", "v1.2.3"
	cfg.DefaultInboundPolicy = "all-authenticated"
	u := installedCluster(t, cfg, nil)
	got, err := u.Installed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("installed settings\n%+v\nwant\n%+v", got, cfg)
	}
}

// TestInstalledRefuses: no Plexus, or Plexus installed by Helm, is said so.
func TestInstalledRefuses(t *testing.T) {
	empty := Upgrader{Client: fake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
	_, err := empty.Installed(context.Background())
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "no namespace plexus-system") {
		t.Errorf("no namespace: %v", err)
	}

	nsOnly := Upgrader{Client: fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace}}),
		Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
	_, err = nsOnly.Installed(context.Background())
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "no Deployment plexus-system/plexus-") {
		t.Errorf("namespace alone: %v", err)
	}

	helm := installedCluster(t, install.DefaultConfig(), func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{"meta.helm.sh/release-name": "plexus-control-plane"})
	})
	_, err = helm.Installed(context.Background())
	if err == nil || !strings.Contains(err.Error(), "installed by Helm (release plexus-control-plane): upgrade it with helm upgrade") {
		t.Errorf("installed by Helm: %v", err)
	}
}

// TestCheckRefusesInPlaceImpossibleChanges: the trust domain and
// node-image mode are kept; everything else may change.
func TestCheckRefusesInPlaceImpossibleChanges(t *testing.T) {
	installed := install.DefaultConfig()
	td := installed
	td.TrustDomain = "other.example"
	if err := Check(installed, td); err == nil || !strings.Contains(err.Error(), "--trust-domain other.example: the mesh's is cluster.local") {
		t.Errorf("trust domain: %v", err)
	}
	nim := installed
	nim.NodeImageMode = true
	if err := Check(installed, nim); err == nil || !strings.Contains(err.Error(), "--node-image-mode=true") {
		t.Errorf("node-image mode: %v", err)
	}
	ok := installed
	ok.HA, ok.Version, ok.DefaultInboundPolicy = true, "v2", "deny"
	if err := Check(installed, ok); err != nil {
		t.Errorf("HA, version and policy: %v", err)
	}
}

// TestInstalledRefusesAMissingNodeAgent: a DaemonSet gone from an install
// that had one is not read as node-image mode.
func TestInstalledRefusesAMissingNodeAgent(t *testing.T) {
	u := installedCluster(t, install.DefaultConfig(), nil)
	ds := install.Ref{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: install.Namespace, Name: "plexus-node"}
	res, _ := ds.Resource()
	if err := u.Dynamic.Resource(res).Namespace(ds.Namespace).Delete(context.Background(), ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u.Client = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}})
	if _, err := u.Installed(context.Background()); err == nil || !strings.Contains(err.Error(), "DaemonSet plexus-system/plexus-node is missing") {
		t.Errorf("err = %v", err)
	}
	u.Client = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})
	cfg, err := u.Installed(context.Background())
	if err != nil || !cfg.NodeImageMode {
		t.Errorf("node-image mode install: %+v, %v", cfg, err)
	}
}
