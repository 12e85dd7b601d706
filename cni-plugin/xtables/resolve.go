package xtables

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// KubeHint is the chain the kubelet creates in the mangle table of the
// backend it uses, so that other components can pick the same one.
const KubeHint = "KUBE-IPTABLES-HINT"

// Resolve turns Auto into the backend the node uses, judged from the
// current network namespace (the host's, for a hostNetwork agent) the way
// Kubernetes' iptables-wrapper does: the backend holding the kubelet's
// KUBE-IPTABLES-HINT chain, else the one holding more rules, nft on a tie.
// Legacy and NFT are returned as they are. The reason says what decided.
func Resolve(ctx context.Context, m Mode) (Mode, string, error) {
	if err := m.Validate(); err != nil {
		return "", "", err
	}
	if m == Legacy || m == NFT {
		return m, "configured", nil
	}
	nft, nftErr := saveAll(ctx, NFT)
	legacy, legacyErr := saveAll(ctx, Legacy)
	if nftErr != nil && legacyErr != nil {
		return "", "", fmt.Errorf("reading the node's rules to choose an iptables backend: %w; %w", nftErr, legacyErr)
	}
	mode, reason := chooseMode(nft, legacy)
	return mode, reason, nil
}

// chooseMode decides from the iptables-save output of both backends.
func chooseMode(nftSaved, legacySaved string) (Mode, string) {
	switch {
	case strings.Contains(nftSaved, KubeHint):
		return NFT, "the kubelet's " + KubeHint + " chain is in nft"
	case strings.Contains(legacySaved, KubeHint):
		return Legacy, "the kubelet's " + KubeHint + " chain is in legacy"
	}
	n, l := countRules(nftSaved), countRules(legacySaved)
	if l > n {
		return Legacy, fmt.Sprintf("legacy holds more rules (%d) than nft (%d)", l, n)
	}
	return NFT, fmt.Sprintf("nft holds %d rules, legacy %d (nft on a tie)", n, l)
}

func countRules(saved string) int {
	n := 0
	for line := range strings.Lines(saved) {
		if strings.HasPrefix(line, "-") {
			n++
		}
	}
	return n
}

// saveAll is iptables-save and ip6tables-save of one backend, all tables.
// Without -t no table is created and no kernel module is loaded. A missing
// IPv6 binary or table is not an error.
func saveAll(ctx context.Context, m Mode) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var all strings.Builder
	for i, bin := range []string{"iptables-" + string(m) + "-save", "ip6tables-" + string(m) + "-save"} {
		out, err := exec.CommandContext(ctx, bin).Output()
		if err != nil && i == 0 {
			return "", fmt.Errorf("%s: %w", bin, err)
		}
		all.Write(out)
	}
	return all.String(), nil
}
