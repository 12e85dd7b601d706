package rules

import (
	"fmt"
	"strings"
)

// RenderApply renders the iptables-restore input (for use with --noflush)
// that installs rs in one transaction. Declaring our chains flushes them, and
// hooks already present in current (from an earlier ADD) are deleted first,
// so applying twice leaves exactly one copy. Hooks are inserted first in
// their built-in chain so no other rule in the pod can pre-empt them.
func RenderApply(rs RuleSet, current State) string {
	return render(rs, current.Hooks, ":%s - [0:0]\n")
}

// RenderCreate renders restore input (for --noflush) that installs rs only
// into a table holding none of our chains: it creates them with -N, so the
// whole transaction fails, changing nothing, if one already exists. A fresh
// pod thus needs no iptables-save; on failure use RenderApply with the
// saved state.
func RenderCreate(rs RuleSet) string {
	return render(rs, nil, "-N %s\n")
}

func render(rs RuleSet, deleteHooks []string, declare string) string {
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, line := range deleteHooks {
		b.WriteString(deleteLine(line))
		b.WriteByte('\n')
	}
	for _, c := range Chains() {
		fmt.Fprintf(&b, declare, c)
	}
	for _, r := range rs.Rules {
		b.WriteString(r.Line())
		b.WriteByte('\n')
	}
	for _, h := range rs.Hooks {
		b.WriteString("-I " + h.Chain + " 1 " + h.Spec() + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// RenderDelete renders the iptables-restore input (for use with --noflush)
// that removes every hook pointing at our chains and the chains themselves,
// as found in current. It returns "" when there is nothing to remove.
func RenderDelete(current State) string {
	if current.Empty() {
		return ""
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, line := range current.Hooks {
		b.WriteString(deleteLine(line))
		b.WriteByte('\n')
	}
	for _, c := range Chains() {
		if current.HasChain(c) {
			// Declaring flushes the chain so that -X succeeds.
			b.WriteString(":" + c + " - [0:0]\n")
		}
	}
	for _, c := range Chains() {
		if current.HasChain(c) {
			b.WriteString("-X " + c + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// deleteLine turns a saved "-A CHAIN spec" line into "-D CHAIN spec".
func deleteLine(line string) string {
	return "-D " + strings.TrimPrefix(line, "-A ")
}
