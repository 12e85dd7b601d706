package multiclusterv1alpha1_test

import (
	"context"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/deploy"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/mctest"
)

const crdFile = "plexus-multicluster/link-crd.yaml"

// linkCRD reads the Link CRD as deploy embeds it.
func linkCRD(t *testing.T) []byte {
	t.Helper()
	raw, err := fs.ReadFile(deploy.Manifests, crdFile)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestLinkCRDNames: the CRD serves this package's group, version and
// kind, and its schema prunes what it does not know.
func TestLinkCRDNames(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(linkCRD(t), &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != mc.Group || crd.Spec.Names.Kind != mc.LinkKind || crd.Name != mc.LinkResource.Resource+"."+mc.Group {
		t.Errorf("CRD %s serves %s %s, want %s %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, mc.Group, mc.LinkKind)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != mc.GroupVersion.Version {
		t.Fatalf("CRD versions %+v, want only %s", crd.Spec.Versions, mc.GroupVersion.Version)
	}
	if crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Error("no status subresource: the controller's status writes would race the spec's")
	}
	if s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["clusterName"]; s.MaxLength == nil || *s.MaxLength != mc.MaxClusterNameLength {
		t.Errorf("clusterName maxLength %v, want %d", s.MaxLength, mc.MaxClusterNameLength)
	}
}

// TestLinkAgainstAPIServer: on a real kube-apiserver the CRD is accepted
// (its CEL rules compile), a Link round-trips into Link by mc.DecodeLink,
// status is written through its subresource only, and bad specs are
// refused naming the field.
func TestLinkAgainstAPIServer(t *testing.T) {
	s := apiservertest.Start(t)
	cfg := &rest.Config{Host: s.URL, BearerToken: apiservertest.AdminToken, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // self-signed, loopback, test-only
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	mctest.InstallLinkCRD(t, dyn)
	links := dyn.Resource(mc.LinkResource).Namespace("default")

	link := func(name, spec string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		var sp map[string]any
		if err := yaml.Unmarshal([]byte(spec), &sp); err != nil {
			t.Fatal(err)
		}
		u.Object["spec"] = sp
		u.SetAPIVersion(mc.APIVersion)
		u.SetKind(mc.LinkKind)
		u.SetName(name)
		return u
	}

	got, err := links.Create(ctx, link("b", "clusterName: b\ncredentialsSecret: cluster-credentials-b\nremoteDiscoverySelector: {matchLabels: {a: b}}"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a valid Link refused: %v", err)
	}
	l, err := mc.DecodeLink(got)
	if err != nil {
		t.Fatal(err)
	}
	want := mc.LinkSpec{ClusterName: "b", CredentialsSecret: "cluster-credentials-b", RemoteDiscoverySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}
	if !reflect.DeepEqual(l.Spec, want) {
		t.Errorf("Link spec %+v, want %+v", l.Spec, want)
	}

	// Status through the subresource; a status in an update of the object
	// itself is dropped.
	got.Object["status"] = map[string]any{"observedGeneration": int64(1), "mirrorServices": []any{
		map[string]any{"remoteRef": map[string]any{"namespace": "shop", "name": "web"}, "localRef": map[string]any{"namespace": "shop", "name": "web-b"}},
	}}
	if got, err = links.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing status: %v", err)
	}
	if l, err = mc.DecodeLink(got); err != nil || len(l.Status.MirrorServices) != 1 || l.Status.MirrorServices[0].LocalRef.Name != "web-b" {
		t.Errorf("status as written: %+v (%v)", l.Status, err)
	}

	// clusterName cannot change.
	got.Object["spec"].(map[string]any)["clusterName"] = "c"
	if _, err := links.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "clusterName cannot change") {
		t.Errorf("changing clusterName: %v, want Invalid naming it", err)
	}

	for _, c := range []struct{ spec, want string }{
		{"clusterName: B\ncredentialsSecret: s", "is not a DNS label"},
		{"clusterName: b.c\ncredentialsSecret: s", "is not a DNS label"},
		{"clusterName: " + strings.Repeat("a", mc.MaxClusterNameLength+1) + "\ncredentialsSecret: s", "spec.clusterName"},
		{"clusterName: b", "spec.credentialsSecret"},
		{"clusterName: b\ncredentialsSecret: s\nremoteDiscoverySelector: {matchExpressions: [{key: a, operator: Is}]}", "operator"},
	} {
		_, err := links.Create(ctx, link("bad", c.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Link with spec %q: %v, want Invalid containing %q", c.spec, err, c.want)
		}
	}

	// A field this version does not know is an error in mc.DecodeLink, not
	// silently dropped.
	u := link("x", "clusterName: b\ncredentialsSecret: s")
	u.Object["spec"].(map[string]any)["gateway"] = "10.0.0.1"
	if _, err := mc.DecodeLink(u); err == nil || !strings.Contains(err.Error(), "gateway") {
		t.Errorf("DecodeLink with an unknown field: %v, want an error naming it", err)
	}
}
