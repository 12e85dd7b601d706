// Package mctest helps the multicluster tests: the Link CRD on a test API
// server, and kubeconfigs for a linked cluster's credentials.
package mctest

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// LinkCRDFile is the Link CRD in deploy.Manifests.
const LinkCRDFile = "plexus-multicluster/link-crd.yaml"

// InstallLinkCRD creates the Link CRD through dyn and waits up to 30 s
// until Links are served; creating it compiles its CEL rules.
func InstallLinkCRD(t testing.TB, dyn dynamic.Interface) {
	t.Helper()
	raw, err := fs.ReadFile(deploy.Manifests, LinkCRDFile)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &crd.Object); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crdRes).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Link CRD: %v", err)
	}
	if !eventually.Holds(30*time.Second, func() bool {
		_, err = dyn.Resource(mc.LinkResource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil
	}) {
		t.Fatalf("Links not served after 30s: %v", err)
	}
}

// Kubeconfig reaches server (a test API server: its certificate is not
// verified) with token.
func Kubeconfig(server, token string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server, token)
}
