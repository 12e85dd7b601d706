#!/usr/bin/env bash
# Runs the cluster benchmark (`make bench-cluster`, not part of make test):
# pod to pod on the local cluster, meshed against unmeshed, interleaved
# runs at fixed rates (TestClusterBench in integration/mesh). Prints the
# Markdown tables, also written to $PLEXUS_BENCH_CLUSTER_OUT when set.
# Brings the cluster up if it is not running, and takes it down again
# afterwards in that case. PLEXUS_BENCH_CLUSTER_RATES, _ROUNDS and
# _DURATION change the runs (500,1000,2000; 2; 30s).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
cd "$PLEXUS_ROOT"

[ "$(id -u)" = 0 ] || die "make bench-cluster needs root: it runs the local cluster"

out=${PLEXUS_BENCH_CLUSTER_OUT:-}
tmp=$(mktemp)
if [ -f "$STATE_DIR/up.complete" ]; then
	trap 'rm -f "$tmp"' EXIT
	"$HERE/cluster/up.sh" >/dev/null
else
	trap '"$HERE/cluster/down.sh" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
	"$HERE/cluster/up.sh" >/dev/null
fi
export_test_env
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | cut -d' ' -f3)"
rc=0
PLEXUS_BENCH_CLUSTER=1 PLEXUS_BENCH_CLUSTER_OUT=$tmp go test -count=1 -timeout 60m -run '^TestClusterBench$' ./integration/mesh >&2 || rc=$?
cat "$tmp"
[ -z "$out" ] || cp "$tmp" "$out"
exit $rc
