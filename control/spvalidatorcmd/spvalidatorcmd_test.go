package spvalidatorcmd

import (
	"io"
	"strings"
	"testing"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/webhookserver"
)

func TestParseFlags(t *testing.T) {
	c, err := ParseFlags([]string{"--namespace=plexus-system"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Flags: webhookserver.Flags{Flags: component.Flags{AdminAddr: ":9997"}, Addr: ":8443", Namespace: "plexus-system", Service: "plexus-sp-validator",
		TLSSecret: "plexus-sp-validator-tls", WebhookConfig: "plexus-sp-validator"}, ClusterDomain: "cluster.local"}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Config{Flags: webhookserver.Flags{Flags: component.Flags{AdminAddr: ":9997"}, Addr: "8443", Namespace: "", Service: "plexus-sp-validator",
		TLSSecret: "Bad_Secret", WebhookConfig: "plexus-sp-validator"}, ClusterDomain: "cluster.local."}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`--addr "8443"`, `--namespace (or POD_NAMESPACE) ""`, `--tls-secret "Bad_Secret"`, `--cluster-domain "cluster.local."`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\ndoes not name %s", err, want)
		}
	}
	if _, err := ParseFlags([]string{"--namespace=x", "extra"}, io.Discard); err == nil {
		t.Error("ParseFlags accepted an argument")
	}
}
