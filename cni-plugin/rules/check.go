package rules

import (
	"fmt"
	"slices"
	"strings"
)

// Compare reports how current differs from want. A nil want means the pod
// must have none of our chains or hooks. The error lists, per chain, the
// rules that are missing and those that are unexpected, or says the order
// differs; nil means the table matches.
func Compare(want *RuleSet, current State) error {
	var problems []string
	if want == nil {
		for _, c := range Chains() {
			if current.HasChain(c) {
				problems = append(problems, fmt.Sprintf("chain %s exists but the pod is not meshed", c))
			}
		}
		for _, h := range current.Hooks {
			problems = append(problems, fmt.Sprintf("unexpected hook %q", h))
		}
		return joinProblems("nat", problems)
	}
	fam := want.Family.String()

	wantHooks := make([]string, 0, len(want.Hooks))
	for _, h := range want.Hooks {
		wantHooks = append(wantHooks, h.Line())
	}
	problems = append(problems, diffLines("hooks", wantHooks, current.Hooks, false)...)

	for _, c := range Chains() {
		var wantLines []string
		for _, r := range want.Rules {
			if r.Chain == c {
				wantLines = append(wantLines, r.Line())
			}
		}
		if !current.HasChain(c) {
			problems = append(problems, fmt.Sprintf("chain %s is missing", c))
			continue
		}
		problems = append(problems, diffLines("chain "+c, wantLines, current.Chains[c], true)...)
	}
	return joinProblems(fam+" nat", problems)
}

// diffLines compares two rule lists. Hooks are compared as a set (their
// position among other rules of a built-in chain is not ours to check);
// our chains must match in order.
func diffLines(what string, want, got []string, ordered bool) []string {
	var problems []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			problems = append(problems, fmt.Sprintf("%s: missing   %s", what, w))
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			problems = append(problems, fmt.Sprintf("%s: unexpected %s", what, g))
		}
	}
	if len(problems) == 0 {
		if len(want) != len(got) {
			problems = append(problems, fmt.Sprintf("%s: has %d rules, want %d (duplicates)", what, len(got), len(want)))
		} else if ordered && !slices.Equal(want, got) {
			problems = append(problems, fmt.Sprintf("%s: rules are in the wrong order:\n    want %s\n    got  %s",
				what, strings.Join(want, "\n         "), strings.Join(got, "\n         ")))
		}
	}
	return problems
}

func joinProblems(table string, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s table differs from the expected plexus rules:\n  %s", table, strings.Join(problems, "\n  "))
}
