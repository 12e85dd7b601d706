package podcontract

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// EnvAdmitted is the environment variable of the plexus-proxy container
// in which the injector records the redirect settings a pod was admitted
// with: its RedirectAnnotations as a JSON object ("{}" when it has none).
// A container's environment cannot change after the pod is created, its
// annotations can; so the CNI plugin and the node agent's repair take the
// settings from here when it is present, and read the annotations only of
// pods injected before it existed. The proxy does not read it.
const EnvAdmitted = "PLEXUS_REDIRECT_ANNOTATIONS"

// RedirectAnnotations are the annotations FromAnnotations reads: every
// setting that changes the redirect rules or is validated with them.
func RedirectAnnotations() []string {
	return []string{
		AnnotationSkipInboundPorts, AnnotationSkipOutboundPorts,
		AnnotationSkipInboundSubnets, AnnotationSkipOutboundSubnets,
		AnnotationOpaquePorts, AnnotationProxyUID,
		AnnotationInboundPort, AnnotationOutboundPort, AnnotationAdminPort,
	}
}

// EncodeAdmitted returns the value of EnvAdmitted for a pod with
// annotations a: the RedirectAnnotations among them, as a JSON object
// with sorted keys. Other keys are left out.
func EncodeAdmitted(a map[string]string) string {
	out := map[string]string{}
	for _, k := range RedirectAnnotations() {
		if v, ok := a[k]; ok {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out) // a map of strings always encodes
	return string(b)
}

// DecodeAdmitted reads a value of EnvAdmitted back into annotations for
// FromAnnotations. Anything but a JSON object of RedirectAnnotations
// (string values) is an error naming the variable.
func DecodeAdmitted(v string) (map[string]string, error) {
	var a map[string]string
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return nil, fmt.Errorf("%s=%q: want a JSON object of %s* redirect annotations: %w", EnvAdmitted, v, AnnotationPrefix, err)
	}
	if a == nil {
		return nil, fmt.Errorf("%s=%q: want a JSON object, not null", EnvAdmitted, v)
	}
	var unknown []string
	for k := range a {
		if !slices.Contains(RedirectAnnotations(), k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, errors.New(EnvAdmitted + " holds settings that are not redirect annotations: " + strings.Join(unknown, ", "))
	}
	return a, nil
}
