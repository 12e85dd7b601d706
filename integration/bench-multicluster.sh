#!/usr/bin/env bash
# Runs the multicluster benchmark (`make bench-multicluster`, not part of
# make test): a's client to b's server across the two local clusters, flat
# against through b's gateway, interleaved runs at fixed rates
# (TestMulticlusterBench in integration/mesh). Prints the Markdown tables,
# also written to $PLEXUS_BENCH_MULTICLUSTER_OUT when set. Brings both
# clusters up (flat) if they are not running, and takes them down again
# afterwards in that case. PLEXUS_BENCH_MULTICLUSTER_RATES, _ROUNDS and
# _DURATION change the runs (1000; 2; 30s).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
cd "$PLEXUS_ROOT"

[ "$(id -u)" = 0 ] || die "make bench-multicluster needs root: it runs the local clusters"

out=${PLEXUS_BENCH_MULTICLUSTER_OUT:-}
tmp=$(mktemp)
if [ -f "$STATE_DIR/up.complete" ]; then
	trap 'rm -f "$tmp"' EXIT
else
	trap '"$HERE/cluster/down.sh" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
fi
"$HERE/cluster/up.sh" >/dev/null
PLEXUS_CLUSTER_NAME=b PLEXUS_MC_MODE=flat "$HERE/cluster/up.sh" >/dev/null
"$HERE/cluster/pair.sh" mode flat >/dev/null
export_test_env
export_pair_env
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | cut -d' ' -f3)"
rc=0
PLEXUS_BENCH_MULTICLUSTER=1 PLEXUS_BENCH_MULTICLUSTER_OUT=$tmp PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN \
	go test -count=1 -timeout 60m -run '^TestMulticlusterBench$' ./integration/mesh >&2 || rc=$?
cat "$tmp"
[ -z "$out" ] || cp "$tmp" "$out"
exit $rc
