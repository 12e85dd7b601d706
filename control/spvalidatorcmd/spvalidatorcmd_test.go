package spvalidatorcmd

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	c, err := ParseFlags([]string{"--namespace=plexus-system"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Addr: ":8443", AdminAddr: ":9997", Namespace: "plexus-system", Service: "plexus-sp-validator",
		TLSSecret: "plexus-sp-validator-tls", WebhookConfig: "plexus-sp-validator", ClusterDomain: "cluster.local"}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Config{Addr: "8443", AdminAddr: ":9997", Namespace: "", Service: "plexus-sp-validator",
		TLSSecret: "Bad_Secret", WebhookConfig: "plexus-sp-validator", ClusterDomain: "cluster.local."}
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
