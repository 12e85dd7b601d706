package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
)

const (
	httpRoutes = "httproutes.gateway.networking.k8s.io"
	grpcRoutes = "grpcroutes.gateway.networking.k8s.io"
)

func TestDecideGatewayCRD(t *testing.T) {
	ours := CRDRelease{BundleVersion: "v1.6.3", Channel: "standard"}
	for _, tc := range []struct {
		name      string
		installed *CRDRelease
		render    bool
		fatal     bool
		note      []string // substrings of the note; none means no note
	}{
		{name: "absent", installed: nil, render: true},
		{name: "older, same channel", installed: &CRDRelease{"v1.5.1", "standard"}, render: true,
			note: []string{"upgrading the installed HTTPRoute CRD from v1.5.1 (standard) to Plexus's v1.6.3 (standard)"}},
		{name: "older than required, same channel", installed: &CRDRelease{"v1.0.0", "standard"}, render: true,
			note: []string{"upgrading", "v1.0.0"}},
		{name: "same", installed: &CRDRelease{"v1.6.3", "standard"},
			note: []string{"keeping the installed HTTPRoute CRD v1.6.3 (standard), the same as Plexus's"}},
		{name: "newer", installed: &CRDRelease{"v1.7.0", "standard"},
			note: []string{"keeping the installed HTTPRoute CRD v1.7.0 (standard), newer than Plexus's v1.6.3"}},
		{name: "newer pre-release", installed: &CRDRelease{"v1.7.0-rc.1", "standard"},
			note: []string{"newer than Plexus's v1.6.3"}},
		{name: "older pre-release of ours", installed: &CRDRelease{"v1.6.3-rc.2", "standard"}, render: true,
			note: []string{"upgrading"}},
		{name: "other channel, older but enough", installed: &CRDRelease{"v1.4.0", "experimental"},
			note: []string{"keeping the installed HTTPRoute CRD v1.4.0 (experimental)", "works with any channel at v1.2.0 or later", "delete the CRD first (that deletes every HTTPRoute)", "--skip-gateway-api-crds"}},
		{name: "other channel, newer", installed: &CRDRelease{"v1.7.0", "experimental"},
			note: []string{"keeping the installed HTTPRoute CRD v1.7.0 (experimental)"}},
		{name: "other channel, same version", installed: &CRDRelease{"v1.6.3", "experimental"},
			note: []string{"never replaces a CRD of another channel"}},
		{name: "other channel, too old", installed: &CRDRelease{"v1.1.0", "experimental"}, fatal: true,
			note: []string{"the installed HTTPRoute CRD v1.1.0 (experimental) is older than the v1.2.0 Plexus needs", "upgrade it", "--skip-gateway-api-crds to install without it"}},
		{name: "unannotated third-party CRD", installed: &CRDRelease{},
			note: []string{"keeping the installed HTTPRoute CRD: it has no readable", "cannot tell its release", "delete the CRD first"}},
		{name: "version but no channel", installed: &CRDRelease{BundleVersion: "v1.0.0"},
			note: []string{"has no readable"}},
		{name: "unparsable version", installed: &CRDRelease{"main", "standard"},
			note: []string{"has no readable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideGatewayCRD("HTTPRoute", ours, tc.installed)
			if d.Render != tc.render || d.Fatal != tc.fatal {
				t.Errorf("render %v fatal %v, want %v and %v (note %q)", d.Render, d.Fatal, tc.render, tc.fatal, d.Note)
			}
			if len(tc.note) == 0 && d.Note != "" {
				t.Errorf("note %q, want none", d.Note)
			}
			for _, want := range tc.note {
				if !strings.Contains(d.Note, want) {
					t.Errorf("note %q lacks %q", d.Note, want)
				}
			}
		})
	}
}

// fakeCRD is an installed CRD as the API server returns it.
func fakeCRD(name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	u.SetName(name)
	u.SetAnnotations(annotations)
	return u
}

func release(v, channel string) map[string]string {
	return map[string]string{AnnotationBundleVersion: v, AnnotationChannel: channel}
}

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "CustomResourceDefinitionList"}, objs...)
}

func fakeCluster(objs ...runtime.Object) CRDLookup { return ClusterCRDs(fakeClient(objs...)) }

// failingCluster is a fake API server whose every get of a CRD fails with err.
func failingCluster(err error) CRDLookup {
	client := fakeClient()
	client.PrependReactor("get", "customresourcedefinitions", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
	return ClusterCRDs(client)
}

var (
	crdsForbidden = apierrors.NewForbidden(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, grpcRoutes,
		errors.New(`User "dev" cannot get resource "customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope`))
	unreachable = &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + grpcRoutes,
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	// The errors plexusctl's lookup returns without a cluster (control/cli/plexusctl connect).
	emptyKubeconfig   = fmt.Errorf("kubeconfig: %w", clientcmd.ErrEmptyConfig)
	missingKubeconfig = fmt.Errorf("kubeconfig: %w", &fs.PathError{Op: "stat", Path: "/home/dev/.kube/nope", Err: syscall.ENOENT})
)

// TestDecideUnreadCRDs: a lookup that failed renders Plexus's CRDs only
// when no cluster is configured at all; a configured cluster that could
// not be asked fails install, naming the error and the ways forward.
func TestDecideUnreadCRDs(t *testing.T) {
	ours := CRDRelease{BundleVersion: "v1.6.3", Channel: "standard"}
	noCluster := []string{"could not read the installed Gateway API CRDs (kubeconfig: ", "no cluster is configured",
		"Plexus's GRPCRoute and HTTPRoute CRDs v1.6.3 (standard) are rendered without being checked against a cluster", "--skip-gateway-api-crds to leave them out"}
	// fails: the note of a configured cluster, whose error ends with errTail.
	fails := func(errTail string) []string {
		return []string{"could not read the installed Gateway API CRDs from the cluster (", errTail + "), and Plexus", "will not render its GRPCRoute and HTTPRoute CRDs v1.6.3 (standard) unchecked",
			"newer or experimental-channel installation", "fix access to the cluster (install needs get on customresourcedefinitions.apiextensions.k8s.io)",
			"--skip-gateway-api-crds to leave the Gateway API CRDs out"}
	}
	for _, tc := range []struct {
		name   string
		err    error
		render bool
		note   []string
	}{
		{name: "no kubeconfig, not in a cluster", err: emptyKubeconfig, render: true, note: noCluster},
		{name: "kubeconfig file missing", err: missingKubeconfig, render: true, note: noCluster},
		{name: "forbidden", err: fmt.Errorf("reading CRD %s: %w", grpcRoutes, crdsForbidden), note: fails("reading CRD " + grpcRoutes + ": " + crdsForbidden.Error())},
		{name: "unreachable", err: fmt.Errorf("reading CRD %s: %w", grpcRoutes, unreachable), note: fails("dial tcp: connection refused")},
		{name: "timeout", err: fmt.Errorf("reading CRD %s: %w", grpcRoutes, context.DeadlineExceeded), note: fails("context deadline exceeded")},
		{name: "kubeconfig unusable", err: errors.New(`kubeconfig: context "prod" does not exist`), note: fails(`context "prod" does not exist`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideUnreadCRDs("GRPCRoute and HTTPRoute", ours, tc.err)
			if d.Render != tc.render || d.Fatal == tc.render {
				t.Errorf("render %v fatal %v, want render %v and fatal %v (note %q)", d.Render, d.Fatal, tc.render, !tc.render, d.Note)
			}
			for _, want := range tc.note {
				if !strings.Contains(d.Note, want) {
					t.Errorf("note %q lacks %q", d.Note, want)
				}
			}
		})
	}
}

// TestNoClusterConfiguredFromKubeconfig: the errors client-go's loader
// gives plexusctl with no kubeconfig and with a missing one say that no
// cluster is configured; one naming a context it lacks does not.
func TestNoClusterConfiguredFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	kubeconfig := filepath.Join(dir, "config")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: dev, context: {cluster: c, user: u}}]\ncurrent-context: dev\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, context string
		noCluster           bool
	}{
		{name: "none", noCluster: true},
		{name: "missing file", path: filepath.Join(dir, "nope"), noCluster: true},
		{name: "unknown context", path: kubeconfig, context: "prod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = tc.path
			_, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: tc.context}).ClientConfig()
			if err == nil {
				t.Fatal("no error")
			}
			if got := NoClusterConfigured(fmt.Errorf("kubeconfig: %w", err)); got != tc.noCluster {
				t.Errorf("NoClusterConfigured(%v) = %v, want %v", err, got, tc.noCluster)
			}
		})
	}
}

// TestPlanGatewayAPI runs the plan against a fake API server and renders
// what it decided.
func TestPlanGatewayAPI(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		lookup CRDLookup
		render []string // Gateway API CRDs rendered
		notes  []string // a substring of each note, in order
		fails  bool
	}{
		{name: "empty cluster", lookup: fakeCluster(), render: []string{grpcRoutes, httpRoutes}},
		{
			name:   "newer HTTPRoute, older GRPCRoute",
			lookup: fakeCluster(fakeCRD(httpRoutes, release("v1.7.0", "standard")), fakeCRD(grpcRoutes, release("v1.2.1", "standard"))),
			render: []string{grpcRoutes},
			notes:  []string{"upgrading the installed GRPCRoute CRD from v1.2.1", "keeping the installed HTTPRoute CRD v1.7.0 (standard), newer than Plexus's v1.6.3"},
		},
		{
			name:   "experimental channel and a third-party CRD",
			lookup: fakeCluster(fakeCRD(httpRoutes, release("v1.6.0", "experimental")), fakeCRD(grpcRoutes, nil)),
			notes:  []string{"keeping the installed GRPCRoute CRD: it has no readable", "keeping the installed HTTPRoute CRD v1.6.0 (experimental)"},
		},
		{
			name:   "experimental channel too old",
			lookup: fakeCluster(fakeCRD(httpRoutes, release("v1.0.0", "experimental"))),
			render: []string{grpcRoutes},
			notes:  []string{"older than the v1.2.0 Plexus needs"},
			fails:  true,
		},
		{
			name:   "no cluster configured",
			lookup: func(context.Context, string) (*CRDRelease, error) { return nil, emptyKubeconfig },
			render: []string{grpcRoutes, httpRoutes},
			notes:  []string{"no cluster is configured (no kubeconfig, no in-cluster config), so Plexus's GRPCRoute and HTTPRoute CRDs v1.6.3 (standard) are rendered without being checked against a cluster"},
		},
		{
			name:   "forbidden",
			lookup: failingCluster(crdsForbidden),
			notes:  []string{"could not read the installed Gateway API CRDs from the cluster (reading CRD " + grpcRoutes + ": " + crdsForbidden.Error() + ")"},
			fails:  true,
		},
		{
			name:   "unreachable",
			lookup: failingCluster(unreachable),
			notes:  []string{"dial tcp: connection refused), and Plexus will not render"},
			fails:  true,
		},
		{
			name:   "timeout",
			lookup: failingCluster(context.DeadlineExceeded),
			notes:  []string{"(reading CRD " + grpcRoutes + ": context deadline exceeded)"},
			fails:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := PlanGatewayAPI(ctx, deploy.Manifests, tc.lookup)
			if err != nil {
				t.Fatal(err)
			}
			if (plan.Err != nil) != tc.fails {
				t.Errorf("plan error %v, want failure %v", plan.Err, tc.fails)
			}
			if len(plan.Notes) != len(tc.notes) {
				t.Fatalf("notes %q, want %d", plan.Notes, len(tc.notes))
			}
			for i, n := range tc.notes {
				if !strings.Contains(plan.Notes[i], n) {
					t.Errorf("note %d %q lacks %q", i, plan.Notes[i], n)
				}
			}
			cfg := DefaultConfig()
			cfg.CRDsOnly = true
			cfg.OmitGatewayAPICRDs = plan.Omit
			var got []string
			for _, k := range kinds(t, render(t, cfg)) {
				if name, ok := strings.CutPrefix(k, "CustomResourceDefinition "); ok && strings.HasSuffix(name, ".gateway.networking.k8s.io") {
					got = append(got, name)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.render, ",") {
				t.Errorf("rendered %v, want %v", got, tc.render)
			}
		})
	}
}

func TestSkipAndOmitGatewayAPICRDs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SkipGatewayAPICRDs = true
	for _, k := range kinds(t, render(t, cfg)) {
		if strings.HasSuffix(k, ".gateway.networking.k8s.io") {
			t.Errorf("--skip-gateway-api-crds renders %s", k)
		}
	}
	cfg = DefaultConfig()
	cfg.OmitGatewayAPICRDs = []string{"gateways.gateway.networking.k8s.io"}
	if err := testRenderer().Render(cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no Gateway API CRD gateways.gateway.networking.k8s.io") {
		t.Errorf("omitting a CRD Plexus does not ship: got %v", err)
	}
	refs, err := testRenderer().Inventory(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if strings.Contains(r.Name, "gateway.networking.k8s.io") {
			t.Errorf("inventory names %s: uninstall would delete every route", r)
		}
	}
}

// TestGatewayAPICRDsRenderedVerbatim: each rendered Gateway API CRD is the
// embedded file's object, field for field (the goldens abbreviate them;
// deploy's test ties the files to the module).
func TestGatewayAPICRDsRenderedVerbatim(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CRDsOnly = true
	rendered := map[string]object{}
	for _, o := range decodeAll(t, render(t, cfg)) {
		meta, _ := o["metadata"].(object)
		rendered[str(meta["name"])] = o
	}
	files, err := fs.Glob(deploy.Manifests, gatewayAPIDir+"/gateway.networking.k8s.io_*.yaml")
	if err != nil || len(files) != 2 {
		t.Fatalf("embedded Gateway API CRDs: %v %v", files, err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(deploy.Manifests, f)
		if err != nil {
			t.Fatal(err)
		}
		var want object
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		meta, _ := want["metadata"].(object)
		if got := rendered[str(meta["name"])]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s is not rendered as embedded", f)
		}
	}
}
