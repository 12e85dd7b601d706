package inject

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// TestShippedPodAnnotationsPolicy runs the admission policy of
// deploy/plexus-control on a real kube-apiserver: once a pod exists, no
// update (of the pod or of its status) may add, change or remove a
// plexus.dev, config.plexus.dev or other *.plexus.dev annotation, and the
// refusal names the annotations; every other change, and pod creation,
// is unaffected.
func TestShippedPodAnnotationsPolicy(t *testing.T) {
	a := apiservertest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	a.Namespace(t, "shop")
	a.Apply(t, "plexus-control/pod-annotations-policy.yaml")
	admitted := map[string]string{
		"config.plexus.dev/skip-inbound-ports": "25",
		"plexus.dev/injected":                  "true",
		"example.com/owner":                    "team-a",
	}
	create := func(name string) *corev1.Pod {
		t.Helper()
		p, err := admin.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: admitted, Labels: map[string]string{"plexus.dev/proxy-version": "v1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/web:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		return p
	}
	create("web-1")
	apiservertest.WaitEnforced(t, "plexus-pod-annotations", func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods("shop").Patch(ctx, "web-1", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":"1"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	// Creation is never refused, whatever the annotations.
	create("web-2")

	patch := func(body string, subresource ...string) error {
		_, err := admin.CoreV1().Pods("shop").Patch(ctx, "web-2", types.MergePatchType, []byte(body), metav1.PatchOptions{}, subresource...)
		return err
	}
	for _, tc := range []struct {
		name, patch string
		status      bool
		want        []string // in the message; nil: allowed
	}{
		{name: "add a config annotation", patch: `{"metadata":{"annotations":{"config.plexus.dev/skip-outbound-ports":"1-65535"}}}`,
			want: []string{"config.plexus.dev/skip-outbound-ports", "fixed at admission"}},
		{name: "change a config annotation", patch: `{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":"1-4142"}}}`,
			want: []string{"config.plexus.dev/skip-inbound-ports", "fixed at admission"}},
		{name: "remove a config annotation", patch: `{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":null}}}`,
			want: []string{"config.plexus.dev/skip-inbound-ports"}},
		{name: "change plexus.dev/injected", patch: `{"metadata":{"annotations":{"plexus.dev/injected":"false"}}}`,
			want: []string{"plexus.dev/injected"}},
		{name: "add plexus.dev/inject", patch: `{"metadata":{"annotations":{"plexus.dev/inject":"disabled"}}}`,
			want: []string{"plexus.dev/inject"}},
		{name: "add another *.plexus.dev annotation", patch: `{"metadata":{"annotations":{"policy.plexus.dev/x":"y"}}}`,
			want: []string{"policy.plexus.dev/x"}},
		{name: "several at once, with an allowed one", patch: `{"metadata":{"annotations":{"example.com/owner":"team-b","plexus.dev/injected":null,"config.plexus.dev/proxy-uid":"0"}}}`,
			want: []string{"config.plexus.dev/proxy-uid", "plexus.dev/injected"}},
		{name: "through the status", status: true, patch: `{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":"1-4142"}}}`,
			want: []string{"config.plexus.dev/skip-inbound-ports"}},
		{name: "other annotations", patch: `{"metadata":{"annotations":{"example.com/owner":"team-b","example.com/new":"x","notplexus.dev/x":"y","plexus.dev.example.com/x":"z"}}}`},
		{name: "remove another annotation", patch: `{"metadata":{"annotations":{"example.com/owner":null}}}`},
		{name: "labels", patch: `{"metadata":{"labels":{"plexus.dev/proxy-version":"v2","app":"web"}}}`},
		{name: "the status", status: true, patch: `{"status":{"conditions":[{"type":"example.com/Checked","status":"True"}]}}`},
		{name: "same annotations", patch: `{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":"25"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sub []string
			if tc.status {
				sub = []string{"status"}
			}
			err := patch(tc.patch, sub...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			t.Logf("refused: %v", err)
			if !apierrors.IsForbidden(err) {
				t.Fatalf("err = %v, want Forbidden", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q", w)
				}
			}
		})
	}
	t.Run("the policy type-checks against the Pod schema", func(t *testing.T) {
		for _, w := range a.PolicyWarnings(t, "plexus-pod-annotations") {
			t.Errorf("%s: %s", w.FieldRef, w.Warning)
		}
	})
	got, err := admin.CoreV1().Pods("shop").Get(ctx, "web-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range admitted {
		if strings.Contains(k, "plexus.dev/") && got.Annotations[k] != v {
			t.Errorf("annotation %s is %q after the refused updates, want %q", k, got.Annotations[k], v)
		}
	}
}
