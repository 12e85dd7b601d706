#!/usr/bin/env bash
# Runs every benchmark (`make bench`):
#   1. every Go benchmark of the module: hot-path micro-benchmarks, and those
#      that need the local cluster's apiserver and the CNI reference plugins
#      (CNI ADD latency), in Go's format (compare runs with benchstat);
#   2. meshbench: direct vs the Plexus proxy pair (plaintext and mesh mTLS)
#      vs an nginx pair and nginx and HAProxy mutual-TLS pairs (HTTP/1.1, and
#      HTTP/2 pairs carrying h2 between their sides), HTTP/1.1, h2c and
#      gRPC, at fixed rates, maximum throughput and sidecar memory, as
#      Markdown tables.
# Brings the cluster up if it is not running, and takes it down again
# afterwards in that case.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
cd "$PLEXUS_ROOT"

[ "$(id -u)" = 0 ] || die "make bench needs root: benchmarks create network namespaces"

if [ -f "$STATE_DIR/up.complete" ]; then
	"$HERE/cluster/up.sh" >/dev/null
else
	trap '"$HERE/cluster/down.sh" >/dev/null 2>&1 || true' EXIT
	"$HERE/cluster/up.sh" >/dev/null
fi

export PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN PLEXUS_CNI_REF_PLUGINS=$CNI_REF_BIN
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | cut -d' ' -f3)"
go test -run '^$' -bench . -benchmem -count "${BENCH_COUNT:-1}" -timeout 30m ./...
echo
go run ./integration/cmd/meshbench -proxy "$PLEXUS_ROOT/bin/plexus-proxy"
