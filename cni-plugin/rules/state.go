package rules

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// State is what a nat table currently holds of ours, parsed from
// `iptables-save -t nat`.
type State struct {
	// Chains maps each of our chains that exists to its rules, as saved.
	Chains map[string][]string
	// Hooks are saved rules in any other chain that jump to one of ours.
	Hooks []string
}

// HasChain reports whether chain exists.
func (s State) HasChain(chain string) bool {
	_, ok := s.Chains[chain]
	return ok
}

// Empty reports whether none of our chains or hooks exist.
func (s State) Empty() bool { return len(s.Chains) == 0 && len(s.Hooks) == 0 }

// ParseSave extracts our chains and hooks from iptables-save output. Only the
// nat table is considered; other tables in the input are ignored.
func ParseSave(out string) (State, error) {
	st := State{Chains: map[string][]string{}}
	ours := map[string]bool{}
	for _, c := range Chains() {
		ours[c] = true
	}
	table := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case line == "COMMIT":
			table = ""
		case table != "nat":
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if ours[name] {
				if _, ok := st.Chains[name]; !ok {
					st.Chains[name] = nil
				}
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			if len(fields) < 2 {
				return State{}, fmt.Errorf("malformed iptables-save line %q", line)
			}
			chain := fields[1]
			if ours[chain] {
				st.Chains[chain] = append(st.Chains[chain], line)
				continue
			}
			if j := slices.Index(fields, "-j"); j >= 0 && j+1 < len(fields) && ours[fields[j+1]] {
				st.Hooks = append(st.Hooks, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return State{}, fmt.Errorf("reading iptables-save output: %w", err)
	}
	return st, nil
}

// Saved is the State that iptables-save shows of a table holding exactly
// rs: our chains with their rules, and the hooks.
func Saved(rs RuleSet) State {
	st := State{Chains: map[string][]string{}}
	for _, c := range Chains() {
		st.Chains[c] = nil
	}
	for _, r := range rs.Rules {
		st.Chains[r.Chain] = append(st.Chains[r.Chain], r.Line())
	}
	for _, h := range rs.Hooks {
		st.Hooks = append(st.Hooks, h.Line())
	}
	return st
}
