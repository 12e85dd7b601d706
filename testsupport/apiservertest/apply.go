package apiservertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// shipped reads file, a path under deploy/.
func shipped(t testing.TB, file string) []byte {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "../../deploy", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Apply creates, as the admin, every object of file (a path under deploy/,
// any number of YAML documents), as `kubectl create -f` would: a test runs
// against exactly what is shipped.
func (a *Server) Apply(t testing.TB, file string) {
	t.Helper()
	cfg := a.Config(AdminToken)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(shipped(t, file)), 4096)
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", file, err)
		}
		if len(obj.Object) == 0 {
			continue // only comments
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", file, gvk, err)
		}
		var r dynamic.ResourceInterface = client.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = client.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := r.Create(context.Background(), &obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating %s %s: %v", file, gvk.Kind, obj.GetName(), err)
		}
	}
}

// WaitEnforced waits, 30 s at most, until dryRun -- a request made with
// DryRun, so that nothing is written meanwhile -- is refused by the
// admission policy named policy: a policy applied with Apply takes effect
// only once the API server has loaded it and its binding.
func WaitEnforced(t testing.TB, policy string, dryRun func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := dryRun(context.Background())
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("admission policy %s is not enforced after 30s: the dry run got %v", policy, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
