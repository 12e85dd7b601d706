#!/usr/bin/env bash
# make layers: the imports of non-test code that break the layers of
# ARCHITECTURE.md ("The layers"), as "from -> to", then their count. With
# -a, every import that crosses a top-level folder, allowed or not. The
# graph comes from `go list`; make lint enforces the same rules.
set -euo pipefail
cd "$(dirname "$0")/.."
all=false
[ "${1:-}" = -a ] && all=true
M=github.com/plexus-mesh/plexus
go list -f '{{.ImportPath}} {{join .Imports " "}}' ./... | awk -v M="$M" -v all="$all" '
function top(p) { split(p, a, "/"); return a[1] }
function cli(p) { return p ~ /^(control|viz)\/(cli|cmd)(\/|$)/ }
function allowed(src, dst,   s, d) {
	s = top(src); d = top(dst)
	if (s == "integration" || s == "testsupport") return 1
	if (d == "testsupport" || d == "integration") return 0
	if (d == "mesh") return 1
	if (s == "mesh") return 0
	if (s == "daemonset" && d == "cni-plugin") return 1
	if (s == "control" || s == "viz") {
		if (dst ~ /^(control|viz)\/cli(\/|$)/ && !cli(src)) return 0
		if (d == "deploy" && cli(src)) return 1
		if (s == "viz" && d == "control") return 1
		if (s == "control" && d == "viz") return cli(src) || src == "control/healthcheck"
	}
	return 0
}
{
	src = $1; sub(M "/", "", src)
	for (i = 2; i <= NF; i++) {
		if (index($i, M "/") != 1) continue
		dst = $i; sub(M "/", "", dst)
		crosses = top(src) != top(dst) || (!cli(src) && dst ~ /^(control|viz)\/cli(\/|$)/)
		if (!crosses) continue
		if (!allowed(src, dst)) { print src " -> " dst "  (breaks a layer)"; bad++ }
		else if (all == "true") print src " -> " dst
	}
}
END { printf "%d imports break a layer\n", bad }'
