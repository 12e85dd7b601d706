package inject

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// TestPluginReadsAdmittedSettings: what the injector records in the
// proxy's environment is what the CNI plugin (and the node agent's
// repair, which decides as the plugin does) builds the rules from, also
// after the pod's annotations were edited: the namespace's settings
// copied at admission and the pod's own, whatever the annotations say
// now; and the inbound source the proxy is given.
func TestPluginReadsAdmittedSettings(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{
		podcontract.AnnotationSkipOutboundPorts: "3306",
		AnnotationInboundPolicy:                 "mtls",
	}}}
	for _, native := range []string{"true", "false"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{
				podcontract.AnnotationSkipInboundPorts: "25,8000-8100",
				podcontract.AnnotationProxyUID:         "3000",
				AnnotationNativeSidecar:                native,
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/web:1"}}},
		}
		ops, err := Patch(pod, ns, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		injected := apply(t, pod, ops)
		conf, err := netconf.ParseConf([]byte(`{"type":"plexus-cni","kubeconfig":"/k"}`))
		if err != nil {
			t.Fatal(err)
		}
		decide := func(p *corev1.Pod) podcontract.Config {
			t.Helper()
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var pp podrules.Pod
			if err := json.Unmarshal(b, &pp); err != nil {
				t.Fatal(err)
			}
			d, err := podrules.DecidePod(conf, &pp)
			if err != nil || !d.Mesh {
				t.Fatalf("native=%s: DecidePod = %+v, %v", native, d, err)
			}
			return d.Config
		}
		admitted := decide(injected)
		// The admitted settings are the annotations, plus the tap port
		// skipped inbound (tap.go), and the inbound source the proxy binds,
		// which gives the pod the self-call rules.
		want, err := podcontract.FromAnnotations(podcontract.Defaults(), admittedRedirect(injected.Annotations))
		if err != nil {
			t.Fatal(err)
		}
		if want.InboundSource, err = podcontract.ParseInboundSource(podcontract.DefaultInboundSource); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(admitted, want) {
			t.Fatalf("native=%s: the plugin reads %+v from the injected pod, want its admitted annotations' %+v", native, admitted, want)
		}
		edited := injected.DeepCopy()
		edited.Annotations[podcontract.AnnotationSkipInboundPorts] = "1-4142"
		edited.Annotations[podcontract.AnnotationSkipOutboundSubnets] = "0.0.0.0/0"
		delete(edited.Annotations, podcontract.AnnotationSkipOutboundPorts)
		if got := decide(edited); !reflect.DeepEqual(got, admitted) {
			t.Errorf("native=%s: edited annotations changed what the plugin reads:\n%+v\nwant %+v", native, got, admitted)
		}
	}
}
