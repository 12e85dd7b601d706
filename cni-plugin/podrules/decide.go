// Package podrules decides which redirect rules a pod wants: whether it
// is meshed (the pod contract's rule, applied to the plugin's own minimal
// Pod type, read from the API server or the node agent), with which
// settings, and the rule sets for its IP families, compared with what a
// namespace holds. The CNI plugin (ADD, CHECK) and the node agent's
// repair both decide through here.
package podrules

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Decision says what to do with a pod and why.
type Decision struct {
	Mesh   bool
	Reason string
	Config podcontract.Config // set when Mesh
}

// ErrInvalidConfig marks DecidePod errors caused by the plugin config
// rather than by the pod.
var ErrInvalidConfig = errors.New("invalid plugin config")

// DecidePod decides for a pod object already read (by Decide's GET, or from
// the node agent's informer): pods in excluded namespaces, the node agent's
// pods and pods without the proxy are not meshed; for a meshed pod the
// Decision carries its settings: the plugin config, then the redirect
// annotations the pod was admitted with (redirectAnnotations: recorded in
// the proxy's environment, so a later change of the pod's annotations
// changes nothing), and the inbound source its proxy binds (inboundSource,
// also from the environment: the self-call rules exist only for a proxy
// that binds it). A malformed setting is an error naming the pod; an
// unusable plugin config wraps ErrInvalidConfig.
func DecidePod(conf *netconf.NetConf, pod *Pod) (Decision, error) {
	if reason := SkippedByName(conf, pod.Namespace, pod.Name); reason != "" {
		return Decision{Reason: reason}, nil
	}
	if !isMeshed(pod) {
		return Decision{Reason: "pod has no " + ProxyContainerName + " container"}, nil
	}
	base, err := conf.PodBase()
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	annotations, err := redirectAnnotations(pod)
	if err != nil {
		return Decision{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cfg, err := podcontract.FromAnnotations(base, annotations)
	if err != nil {
		return Decision{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if cfg.InboundSource, err = inboundSource(pod); err != nil {
		return Decision{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return Decision{Mesh: true, Reason: "pod has a " + ProxyContainerName + " container", Config: cfg}, nil
}

// SkippedByName says why a pod is never meshed, judging by its namespace
// and name alone (no API call needed), or "" when that does not decide.
func SkippedByName(conf *netconf.NetConf, namespace, name string) string {
	switch {
	case slices.Contains(conf.Excluded(), namespace):
		return fmt.Sprintf("namespace %s is in exclude_namespaces", namespace)
	case namespace == netconf.NodeAgentNamespace && strings.HasPrefix(name, netconf.NodeAgentPodPrefix):
		return "pod is the plexus node agent"
	}
	return ""
}

// Families are the IP families a pod with these addresses gets rules for:
// IPv4 always, IPv6 when it has an IPv6 address.
func Families(podIPs []netip.Addr) []rules.Family {
	fams := []rules.Family{rules.IPv4}
	for _, a := range podIPs {
		if a.Is6() && !a.Is4In6() {
			return append(fams, rules.IPv6)
		}
	}
	return fams
}

func buildSets(cfg podcontract.Config, fams []rules.Family) ([]rules.RuleSet, error) {
	sets := make([]rules.RuleSet, 0, len(fams))
	for _, f := range fams {
		rs, err := rules.Build(cfg, f)
		if err != nil {
			return nil, err
		}
		sets = append(sets, rs)
	}
	return sets, nil
}

// Want returns the rule sets a pod decided as d must have in each family;
// none for a pod that is not meshed.
func Want(d Decision, fams []rules.Family) ([]rules.RuleSet, error) {
	if !d.Mesh {
		return nil, nil
	}
	return buildSets(d.Config, fams)
}

// Diff compares what a pod decided as d must have with the rules read from
// its namespace (Tables.Current), as CHECK does: Compare with Want's sets.
func Diff(d Decision, fams []rules.Family, states map[rules.Family]rules.State) error {
	sets, err := Want(d, fams)
	if err != nil {
		return fmt.Errorf("building rules: %w", err)
	}
	return Compare(sets, fams, states)
}

// Compare holds the rule sets a pod wants (Want's result, one per family
// in fams; nil for a pod that is not meshed) against the rules read from
// its namespace: nil when every family matches, else one error listing
// the missing and unexpected rules. A caller that compares more than once
// (the node agent's repair, before and after it applies) builds the sets
// once.
func Compare(want []rules.RuleSet, fams []rules.Family, states map[rules.Family]rules.State) error {
	var problems []string
	for i, f := range fams {
		var w *rules.RuleSet
		if want != nil {
			w = &want[i]
		}
		if err := rules.Compare(w, states[f]); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
