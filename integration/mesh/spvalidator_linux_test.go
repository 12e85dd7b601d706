package mesh

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const (
	profileCRD       = "../../deploy/crds/serviceprofile.yaml"
	linkerdProfile   = "../../control/serviceprofile/testdata/linkerd-books.yaml"
	spValidator      = "plexus-sp-validator"
	spValidatorHook  = `admission webhook "sp-validator.plexus.dev" denied the request: `
	profileResource  = "serviceprofiles.plexus.dev"
	profileNamespace = "booksapp" // as written in linkerdProfile
)

// TestServiceProfileValidator deploys the control plane and the
// ServiceProfile CRD from deploy/ and proves the sp-validator's contract
// through kubectl: a malformed profile (bad regex, bad duration, unknown
// field, all-zero weights, a name that is not a Service's) is refused on
// create and update with a message naming the field and value, and not
// stored; a Linkerd profile converted by changing its apiVersion is
// accepted and stored whole; no other object ever reaches the webhook,
// even while the validator is down.
func TestServiceProfileValidator(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Lock(t) // plexus-system is ours
	deployControlPlane(t, c)
	installProfileCRD(t, c)
	c.WaitDeploymentReady(t, controlNamespace, spValidator, 2*time.Minute)
	ns := c.Namespace(t, "sp", nil)
	svcName := func(svc string) string { return svc + "." + ns + ".svc.cluster.local" }

	// The caBundle reaches the API server's webhook client a little after
	// the validator is ready: wait for the first answer from the webhook.
	badRegex := profileYAML(ns, svcName("books"), `{routes: [{name: "GET /books/{id}", condition: {method: GET, pathRegex: "/books/([0-9]+"}}]}`)
	clustertest.WaitFor(t, 2*time.Minute, "the sp-validator to answer", func(context.Context) (bool, error) {
		out, err := kubectlResult(c, "apply", "-f", yamlFile(t, badRegex))
		return err != nil && strings.Contains(out, spValidatorHook), nil
	})

	t.Run("malformed profiles are refused naming the field and value", func(t *testing.T) {
		for _, tc := range []struct {
			name, profile, spec string
			want                []string
		}{
			{"bad regex", svcName("books"), `{routes: [{name: "GET /books/{id}", condition: {method: GET, pathRegex: "/books/([0-9]+"}}]}`,
				[]string{`spec.routes[0].condition.pathRegex: Invalid value: "/books/([0-9]+": error parsing regexp: missing closing )`}},
			{"bad timeout", svcName("books"), `{routes: [{name: r, condition: {method: GET}, timeout: "1m30"}]}`,
				[]string{`spec.routes[0].timeout: Invalid value: "1m30": time: missing unit`}},
			{"bad ttl", svcName("books"), `{retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 10, ttl: "10"}}`,
				[]string{`spec.retryBudget.ttl: Invalid value: "10": time: missing unit`}},
			{"unknown field", svcName("books"), `{routes: [{name: r, conditon: {method: GET}}]}`,
				[]string{`spec.routes[0].conditon: unknown field`}},
			{"zero weights", svcName("books"), `{dstOverrides: [{authority: "books.` + ns + `.svc.cluster.local:7002", weight: 0}, {authority: "books-v2.` + ns + `.svc.cluster.local:7002", weight: "0m"}]}`,
				[]string{`spec.dstOverrides: Invalid value: "weights 0, 0": the weights must sum to more than zero`}},
			{"not a Service's name", "web.example.com", `{routes: [{name: r, condition: {method: GET}}]}`,
				[]string{`metadata.name: Invalid value: "web.example.com": must be <svc>.<ns>.svc.cluster.local`}},
			{"every problem at once", svcName("books"), `{routes: [{name: a, condition: {pathRegex: "("}}, {name: a, condition: {method: "GET /"}}]}`,
				[]string{
					`spec.routes[0].condition.pathRegex: Invalid value: "("`,
					`spec.routes[1].name: Invalid value: "a": already the name of routes[0]`,
					`spec.routes[1].condition.method: Invalid value: "GET /"`,
				}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, err := kubectlResult(c, "apply", "-f", yamlFile(t, profileYAML(ns, tc.profile, tc.spec)))
				if err == nil {
					t.Fatalf("kubectl apply accepted it:\n%s", out)
				}
				for _, w := range append([]string{spValidatorHook + "ServiceProfile " + ns + "/" + tc.profile + ": "}, tc.want...) {
					if !strings.Contains(out, w) {
						t.Errorf("kubectl apply said\n%s\nwant it to contain %s", out, w)
					}
				}
				if out, err := kubectlResult(c, "-n", ns, "get", profileResource, tc.profile); err == nil {
					t.Errorf("the refused profile is stored:\n%s", out)
				}
			})
		}
	})

	books := svcName("books")
	t.Run("a converted Linkerd profile is accepted whole", func(t *testing.T) {
		raw, err := os.ReadFile(linkerdProfile)
		if err != nil {
			t.Fatal(err)
		}
		c.Kubectl(t, "apply", "-f", yamlFile(t, strings.ReplaceAll(string(raw), profileNamespace, ns)))
		for path, want := range map[string]string{
			"{.spec.routes[2].responseClasses[0].condition.status.min}": "500",
			"{.spec.routes[3].condition.all[1].any[1].method}":          "PUT",
			"{.spec.retryBudget.ttl}":                                   "10s",
			"{.spec.dstOverrides[1].weight}":                            "100m",
		} {
			if got := c.Kubectl(t, "-n", ns, "get", profileResource, books, "-o", "jsonpath="+path); got != want {
				t.Errorf("stored %s = %q, want %q", path, got, want)
			}
		}
	})

	t.Run("a malformed update is refused and the stored profile kept", func(t *testing.T) {
		raw, err := os.ReadFile(linkerdProfile)
		if err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(strings.ReplaceAll(string(raw), profileNamespace, ns), "timeout: 300ms", "timeout: soon", 1)
		out, err := kubectlResult(c, "apply", "-f", yamlFile(t, bad))
		if err == nil || !strings.Contains(out, spValidatorHook+"ServiceProfile "+ns+"/"+books+": ") ||
			!strings.Contains(out, `spec.routes[1].timeout: Invalid value: "soon"`) {
			t.Fatalf("kubectl apply of a bad update: %v\n%s", err, out)
		}
		if got := c.Kubectl(t, "-n", ns, "get", profileResource, books, "-o", "jsonpath={.spec.routes[1].timeout}"); got != "300ms" {
			t.Errorf("stored timeout %q after a refused update, want 300ms", got)
		}
	})

	t.Run("only ServiceProfile creates and updates reach the webhook", func(t *testing.T) {
		ctx := clustertest.Context(t, time.Minute)
		vwc, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, spValidator, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(vwc.Webhooks) != 1 || len(vwc.Webhooks[0].Rules) != 1 || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
			t.Fatalf("webhook configuration: %+v", vwc.Webhooks)
		}
		w, r := vwc.Webhooks[0], vwc.Webhooks[0].Rules[0]
		if strings.Join(r.APIGroups, ",") != "plexus.dev" || strings.Join(r.APIVersions, ",") != "v1alpha1" ||
			strings.Join(r.Resources, ",") != "serviceprofiles" || len(r.Operations) != 2 ||
			r.Operations[0] != admissionregistrationv1.Create || r.Operations[1] != admissionregistrationv1.Update ||
			*w.FailurePolicy != admissionregistrationv1.Fail || *w.SideEffects != admissionregistrationv1.SideEffectClassNone || *w.TimeoutSeconds != 5 {
			t.Errorf("webhook %+v", w)
		}
	})

	t.Run("validator down: profiles refused, everything else unaffected", func(t *testing.T) {
		scale(t, c, controlNamespace, spValidator, 0)
		defer scale(t, c, controlNamespace, spValidator, 1)
		ctx := clustertest.Context(t, time.Minute)
		// An object that holds a malformed profile's text is no profile.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web.example.com"}, Data: map[string]string{"profile": badRegex}}
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Errorf("creating a ConfigMap with the validator down: %v", err)
		}
		out, err := kubectlResult(c, "apply", "-f", yamlFile(t, profileYAML(ns, svcName("web"), `{routes: [{name: r, condition: {method: GET}}]}`)))
		if err == nil || !strings.Contains(out, "sp-validator.plexus.dev") {
			t.Errorf("creating a profile with the validator down: %v\n%s\nwant the webhook's failure", err, out)
		}
		// Deletes are never sent to it.
		c.Kubectl(t, "-n", ns, "delete", profileResource, books)
	})
}

// installProfileCRD applies the ServiceProfile CRD from deploy/ and waits
// until it serves; it is deleted when the test ends unless it was there
// before.
func installProfileCRD(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	existed := strings.TrimSpace(c.Kubectl(t, "get", "crd", profileResource, "--ignore-not-found", "-o", "name")) != ""
	c.Kubectl(t, "apply", "-f", profileCRD)
	if !existed {
		t.Cleanup(func() { kubectlResult(c, "delete", "crd", profileResource, "--ignore-not-found", "--wait=false") })
	}
	c.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+profileResource)
}

// profileYAML is a ServiceProfile with spec given as YAML flow.
func profileYAML(ns, name, spec string) string {
	return "apiVersion: plexus.dev/v1alpha1\nkind: ServiceProfile\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec: " + spec + "\n"
}

// kubectlResult runs kubectl and returns its combined output and error,
// for commands that are meant to fail.
func kubectlResult(c *clustertest.Cluster, args ...string) (string, error) {
	bin := os.Getenv(clustertest.EnvKubectl)
	if bin == "" {
		bin = "kubectl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
