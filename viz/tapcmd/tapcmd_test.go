package tapcmd

import (
	"io"
	"strings"
	"testing"
)

// The configuration is validated as the flags left it, not as it was
// before they were parsed.
func TestParseFlagsValidatesWhatTheFlagsSet(t *testing.T) {
	base := []string{"--namespace=plexus-viz", "--service-account=plexus-tap"}
	c, err := ParseFlags(base, io.Discard)
	if err != nil {
		t.Fatalf("ParseFlags(%v) = %v", base, err)
	}
	if c.Namespace != "plexus-viz" || c.ServiceAccount != "plexus-tap" {
		t.Errorf("parsed %+v", c)
	}
	if _, err := ParseFlags(append(base, "--tls-secret="), io.Discard); err == nil || !strings.Contains(err.Error(), "--tls-secret is required") {
		t.Errorf("an emptied --tls-secret: %v", err)
	}
	if _, err := ParseFlags(append(base, "extra"), io.Discard); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("a stray argument: %v", err)
	}
}
