#!/usr/bin/env bash
# make lint: the layer rules of ARCHITECTURE.md and the import grouping
# (golangci-lint with .golangci.yml), one name per package, and a probe
# that proves the layer rules bite: a file in the proxy that imports the
# control plane must make golangci-lint fail naming the rule.
set -euo pipefail
source "$(dirname "$0")/cluster/env.sh"
cd "$PLEXUS_ROOT"
[ -x "$GOLANGCI_LINT_BIN" ] || die "no golangci-lint at $GOLANGCI_LINT_BIN (make deps-lint builds it)"

"$GOLANGCI_LINT_BIN" run ./...

dups=$(go list -f '{{.Name}}' ./... | grep -vx main | sort | uniq -d)
[ -z "$dups" ] || die "package names used by more than one package (name each for what it provides): $dups"

probe=sidecar/admin/zz_layer_probe.go
out=$(mktemp)
trap 'rm -f "$probe" "$out"' EXIT
printf 'package admin\n\nimport _ "github.com/plexus-mesh/plexus/control/inject"\n' >"$probe"
if "$GOLANGCI_LINT_BIN" run ./sidecar/admin/ >"$out" 2>&1; then
	die "the layer rules do not bite: $probe imports the control plane and golangci-lint passed"
fi
grep -q "not allowed from list 'data-plane'" "$out" ||
	die "golangci-lint failed on $probe, but not with the data-plane layer rule: $(cat "$out")"
log "lint: layer rules hold, and bite ($probe refused)"
