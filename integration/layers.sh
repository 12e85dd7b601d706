#!/usr/bin/env bash
# make layers: every import of non-test code that crosses a top-level
# folder, or goes from a server into a CLI package (ARCHITECTURE.md, "The
# layers"), as "from -> to". The graph comes from `go list`.
set -euo pipefail
cd "$(dirname "$0")/.."
M=github.com/plexus-mesh/plexus
go list -f '{{.ImportPath}} {{join .Imports " "}}' ./... | awk -v M="$M" '{
	src = $1; sub(M "/", "", src); split(src, a, "/")
	for (i = 2; i <= NF; i++) {
		if (index($i, M "/") != 1) continue
		dst = $i; sub(M "/", "", dst); split(dst, b, "/")
		cliSrc = (src ~ /^(control|viz)\/(cli|cmd)(\/|$)/); cliDst = (dst ~ /^(control|viz)\/cli(\/|$)/)
		if (a[1] != b[1] || (!cliSrc && cliDst)) print src " -> " dst
	}
}' | sort -u
