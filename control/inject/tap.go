package inject

import (
	"strconv"
	"strings"

	"github.com/plexus-mesh/plexus/cni-plugin/podconfig"
)

// TapPort is where the proxy serves the tap API (DESIGN.md §10). The tap
// service calls it directly, with its own identity, so the pod's inbound
// rules must not redirect it: the injector adds it to the skipped inbound
// ports the pod is admitted with (the CNI plugin reads those), as it does
// for no other port, and leaves the pod's annotation as the user wrote it.
const TapPort = 4190

// admittedRedirect returns the redirect annotations the pod is admitted
// with: a with the tap port skipped inbound.
func admittedRedirect(a map[string]string) map[string]string {
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	port := strconv.Itoa(TapPort)
	if v := strings.TrimSpace(out[podconfig.AnnotationSkipInboundPorts]); v != "" {
		out[podconfig.AnnotationSkipInboundPorts] = v + "," + port
	} else {
		out[podconfig.AnnotationSkipInboundPorts] = port
	}
	return out
}
