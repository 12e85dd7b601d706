package plexusctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/cli/portforward/portforwardtest"
	"github.com/plexus-mesh/plexus/control/destination/destinationtest"
)

// diagnosticsAPI is an API server with the Service shop/web (port 80 to
// 8080, one meshed pod web-1 whose proxy serves metrics by port-forward), the pod
// shop/bare (not meshed), destination's Deployment setting the trust
// domain example.org, its ready pod plexus-destination-0 (a real
// destination server of the same objects behind its port-forward to
// 8086) and the trust anchors ConfigMap; anything else is not found.
func diagnosticsAPI(t *testing.T) (string, *portforwardtest.APIServer) {
	t.Helper()
	port, name, ready := int32(8080), "http", true
	dst := destinationtest.Start(t, "example.org", nil,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"}, Spec: corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "web"}, {Name: "plexus-proxy"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	anchors, err := json.Marshal(string(dst.PKI.AnchorsPEM()))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]string{
		"/api/v1/namespaces/plexus-system/pods": `{"kind":"PodList","apiVersion":"v1","items":[
			{"metadata":{"name":"plexus-destination-0","namespace":"plexus-system","labels":{"app.kubernetes.io/name":"plexus-destination"}},
			"spec":{"containers":[{"name":"destination","ports":[{"name":"grpc","containerPort":8086}]}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}]}`,
		"/api/v1/namespaces/plexus-system/configmaps/plexus-identity-trust-anchors": `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"plexus-identity-trust-anchors","namespace":"plexus-system"},
			"data":{"ca-bundle.crt":` + string(anchors) + `}}`,
		"/api/v1/namespaces/shop/services/web": `{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}}`,
		"/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices": `{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","items":[{"metadata":{"name":"web-x","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
			"addressType":"IPv4","ports":[{"name":"http","port":8080}],"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true},"targetRef":{"kind":"Pod","name":"web-1"}}]}]}`,
		"/api/v1/namespaces/shop/pods/web-1": `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop"},"spec":{"serviceAccountName":"web","containers":[{"name":"web"},{"name":"plexus-proxy"}]},"status":{"phase":"Running"}}`,
		"/api/v1/namespaces/shop/pods": `{"kind":"PodList","apiVersion":"v1","items":[
			{"metadata":{"name":"web-1","namespace":"shop"},"spec":{"containers":[{"name":"web"},{"name":"plexus-proxy"}]},"status":{"phase":"Running"}},
			{"metadata":{"name":"bare","namespace":"shop"},"spec":{"containers":[{"name":"web"}]},"status":{"phase":"Running"}}]}`,
		"/apis/apps/v1/namespaces/shop/deployments": `{"kind":"DeploymentList","apiVersion":"apps/v1","items":[]}`,
		"/apis/apps/v1/namespaces/plexus-system/deployments/plexus-destination": `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"plexus-destination","namespace":"plexus-system"},
			"spec":{"selector":{},"template":{"spec":{"containers":[{"name":"destination","args":["destination","--trust-domain=example.org"]}]}}}}`,
	}
	// The proxy's admin port, reached by port-forward.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && r.Host == "localhost" {
			fmt.Fprint(w, "request_total 1\n")
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(proxy.Close)
	pf := &portforwardtest.APIServer{Target: proxy.Listener.Addr().String(), Targets: map[string]string{"plexus-system/plexus-destination-0:8086": dst.Addr}}
	srv := httptest.NewServer(pf.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body, ok := objs[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			body = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not found","reason":"NotFound","code":404}`
		}
		fmt.Fprint(w, body)
	})))
	t.Cleanup(srv.Close)
	return kubeconfig(t, srv.URL), pf
}

func TestDiagnostics(t *testing.T) {
	kc, pf := diagnosticsAPI(t)
	missing := missingKubeconfigFile(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"help lists diagnostics", []string{"-h"}, ExitOK, "diagnostics  proxy-metrics po/NAME", ""},
		{"no subcommand", []string{"diagnostics"}, ExitUsage, "", "Usage:\n  plexusctl diagnostics [flags]\n  plexusctl diagnostics [command]"},
		{"help", []string{"diagnostics", "-h"}, ExitOK, "asked of a ready destination pod as a proxy asks", ""},
		{"endpoints help", []string{"diagnostics", "endpoints", "-h"}, ExitOK, "what destination tells a proxy for SVC.NS:PORT, asked of a ready destination pod as a proxy asks (its first answer to Get), through a port-forward [--compare] [-o wide|json|yaml]\n\nUsage:\n  plexusctl diagnostics endpoints SVC.NS:PORT [flags]", ""},
		{"unknown subcommand", []string{"diagnostics", "frob"}, ExitUsage, "", `plexusctl diagnostics: unknown diagnostics command "frob": want one of endpoints, policy, proxy-metrics (see plexusctl diagnostics --help)`},
		{"metrics no object", []string{"diagnostics", "proxy-metrics"}, ExitUsage, "", "want diagnostics proxy-metrics (po|deploy)/NAME"},
		{"metrics unknown kind", []string{"diagnostics", "proxy-metrics", "svc/web"}, ExitUsage, "", `unknown kind "svc": want po or deploy`},
		{"metrics no kubeconfig", []string{"diagnostics", "proxy-metrics", "po/web-1", "--kubeconfig", missing}, ExitFail, "", "listing pods in shop: "},
		{"metrics pod", []string{"diagnostics", "proxy-metrics", "pod", "web-1", "--kubeconfig", kc}, ExitOK, "request_total 1\n", ""},
		{"metrics po/", []string{"--kubeconfig", kc, "diagnostics", "proxy-metrics", "po/web-1", "-n", "shop"}, ExitOK, "request_total 1\n", ""},
		{"metrics not meshed", []string{"diagnostics", "proxy-metrics", "po/bare", "--kubeconfig", kc}, ExitFail, "", "plexusctl diagnostics proxy-metrics: pod shop/bare is not meshed: it has no plexus-proxy container\n"},
		{"metrics not found", []string{"diagnostics", "proxy-metrics", "deploy/nope", "--kubeconfig", kc}, ExitFail, "", "deployment shop/nope not found"},
		{"endpoints no argument", []string{"diagnostics", "endpoints"}, ExitUsage, "", "want diagnostics endpoints SVC.NS:PORT"},
		{"endpoints malformed", []string{"diagnostics", "endpoints", "web:80"}, ExitUsage, "", `"web:80": want SVC.NS:PORT or SVC.NS.svc.cluster.local:PORT (e.g. web.shop:80)`},
		{"endpoints no port", []string{"diagnostics", "endpoints", "web.shop"}, ExitUsage, "", `"web.shop": want SVC.NS:PORT`},
		{"endpoints bad output", []string{"diagnostics", "endpoints", "web.shop:80", "-o", "xml"}, ExitUsage, "", `unknown output format "xml"`},
		{"endpoints", []string{"diagnostics", "endpoints", "web.shop.svc.cluster.local:80", "--kubeconfig", kc}, ExitOK,
			"web.shop.svc.cluster.local:80: 1 endpoints published by destination (pod plexus-system/plexus-destination-0, trust domain example.org)\n" +
				"ADDRESS         IDENTITY                              WEIGHT   PROTOCOL   ZONE   POD     TERMINATING\n" +
				"10.0.0.1:8080   spiffe://example.org/ns/shop/sa/web   10000    -          -      web-1   no\n", ""},
		{"endpoints json", []string{"diagnostics", "endpoints", "web.shop:80", "--kubeconfig", kc, "-o", "json"}, ExitOK, `"identity": "spiffe://example.org/ns/shop/sa/web"`, ""},
		{"endpoints --compare", []string{"diagnostics", "endpoints", "web.shop:80", "--kubeconfig", kc, "--compare"}, ExitOK, "destination and the EndpointSlices agree on the published addresses\n", ""},
		{"endpoints --trust-domain", []string{"diagnostics", "endpoints", "web.shop:80", "--trust-domain", "td.test", "--kubeconfig", kc}, ExitFail, "",
			"want spiffe://td.test/ns/plexus-system/sa/plexus-destination, got spiffe://example.org/ns/plexus-system/sa/plexus-destination"},
		{"endpoints not found", []string{"diagnostics", "endpoints", "nope.shop:80", "--kubeconfig", kc}, ExitOK, "nope.shop.svc.cluster.local:80: 0 endpoints published by destination (pod plexus-system/plexus-destination-0, trust domain example.org): it does not know the service", ""},
		{"policy no object", []string{"diagnostics", "policy"}, ExitUsage, "", "want diagnostics policy po/NAME"},
		{"policy workload", []string{"diagnostics", "policy", "deploy/web"}, ExitUsage, "", `unknown kind "deployment": want po|pod (plexusctl authz takes workloads)`},
		{"policy bad port", []string{"diagnostics", "policy", "po/web-1", "--port", "70000"}, ExitUsage, "", "--port 70000: want 1-65535"},
		{"policy bad output", []string{"diagnostics", "policy", "po/web-1", "-o", "xml"}, ExitUsage, "", `unknown output format "xml"`},
		{"policy not found", []string{"diagnostics", "policy", "po/nope", "--kubeconfig", kc}, ExitFail, "", "pod shop/nope: not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q and %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			if tc.code == ExitUsage && strings.Count(strings.TrimSpace(stderr), "\n") > 0 && !strings.Contains(stderr, "Usage:") {
				t.Errorf("a usage error of more than one line: %q", stderr)
			}
		})
	}
	// endpoints asked destination through a port-forward to its pod.
	if want := "/api/v1/namespaces/plexus-system/pods/plexus-destination-0/portforward?ports=8086"; !slices.Contains(pf.Paths(), want) {
		t.Errorf("no port-forward %s among %q", want, pf.Paths())
	}
}
