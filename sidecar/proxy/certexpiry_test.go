package proxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// TestCertExpiry: the gauge is the leaf's NotAfter, 0 without one.
func TestCertExpiry(t *testing.T) {
	src := testpki.New("test").Source(spiffe.New("cluster.local", "demo", "web"))
	if src.Cert.Leaf == nil {
		t.Fatal("test leaf without Leaf")
	}
	if got, want := testutil.ToFloat64(certExpiry(src)), float64(src.Cert.Leaf.NotAfter.Unix()); got != want || want == 0 {
		t.Errorf("gauge = %v, want %v", got, want)
	}
	src.Cert = nil
	if got := testutil.ToFloat64(certExpiry(src)); got != 0 {
		t.Errorf("without a certificate: %v, want 0", got)
	}
}
