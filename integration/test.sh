#!/usr/bin/env bash
# Runs every Plexus test (what `make test` and CI run):
#   1. brings the local cluster up;
#   2. go vet, then all Go tests -- unit, root/netns and cluster tests --
#      with the cluster's kubeconfig, kubectl and the CNI reference plugins:
#      every package but the cluster suite on node 1 alone (the local
#      cluster's and the node agent's own tests read one node's files);
#      then nodes 2 and 3 join (two zones: node 2 in zone-b;
#      integration/cluster/node.sh) and the whole cluster suite runs on the
#      three nodes, its multi-node tests (TestCrossNode, TestNodeFailure,
#      TestControlPlaneNodeLoss, TestZoneAware) required to run;
#   3. tears the cluster down and proves nothing was left behind;
#   4. cycles cluster-up/cluster-down five times (the first with flannel
#      as the primary CNI and a second node, the second with a second
#      cluster beside the first: TestClusterPair, destination's remote
#      discovery of the second from the first, and TestMulticluster:
#      Plexus and the multicluster extension in both, linked, traffic and
#      policy across) and proves it again.
# Tears down a running local cluster first. Expects `make deps images` to
# have run (the Makefile does that first).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
cd "$PLEXUS_ROOT"

[ "$(id -u)" = 0 ] || die "make test needs root: the tests create network namespaces and run a kubelet"

phase_start=$SECONDS
phase() {
	log "$(printf '%s done in %ds' "$1" $((SECONDS - phase_start)))"
	phase_start=$SECONDS
}

# Start from no cluster, so the host state recorded here is the host's own.
"$HERE/cluster/down.sh" >/dev/null
sysctls_before=$(mktemp)
for k in $CLUSTER_SYSCTLS; do echo "$k=$(sysctl -n "$k")"; done >"$sysctls_before"
export_test_env
export PLEXUS_CLUSTER_SYSCTLS_BEFORE=$sysctls_before

trap '"$HERE/cluster/down.sh" >/dev/null 2>&1 || true; rm -f "$sysctls_before"' EXIT

"$HERE/cluster/up.sh" >/dev/null
phase "cluster-up"

go vet ./...
rc=0
test_log=$(mktemp)
# Two runs: every package but the cluster suite, several at a time; then
# the cluster suite with the machine to itself. Its balancing checks tell
# a replica 20 ms slower from the others, which a node whose two cores
# also run other packages' tests cannot do (a CI run: the other replicas
# answered 17 requests slower than the slow one).
cluster_suite=github.com/plexus-mesh/plexus/integration/mesh
go test -count=1 -timeout 30m $(go list ./... | grep -vx "$cluster_suite") 2>&1 | tee "$test_log" || rc=$?
phase "go test of every package but the cluster suite"
"$HERE/cluster/node.sh" add 2 3 >/dev/null || die "node.sh add 2 3 failed"
PLEXUS_CLUSTER_ADDED_NODE=plexus-local-3 go test -count=1 -run TestAddedNode ./integration/localcluster 2>&1 | tee -a "$test_log" || rc=$?
phase "nodes 2 and 3 joined"
PLEXUS_TEST_MULTINODE=1 go test -count=1 -timeout 50m "$cluster_suite" 2>&1 | tee -a "$test_log" || rc=$?
phase "go test of the cluster suite ($cluster_suite) on three nodes"
unset PLEXUS_TEST_KUBECONFIG

"$HERE/cluster/down.sh"
PLEXUS_EXPECT_CLUSTER_DOWN=1 go test -count=1 -run 'TestTeardownLeavesNothing|TestClusterUpRefusesTakenPort' ./integration/localcluster || rc=1
phase "cluster-down and its check"
if [ "$rc" != 0 ]; then
	# The failures last, where a reader of only the output's tail sees them:
	# each failed test and the first lines it logged, without the cluster
	# dumps ("[dump]" lines and the JSON logs they hold).
	log "what failed:"
	awk '/--- FAIL|^panic:|^FAIL/ { print; n = 5; next }
		n > 0 && !/\[dump\]/ && !/^[[:space:]]+\{/ { print; n-- }' "$test_log" | cut -c1-300 | head -80
	die "tests failed"
fi
rm -f "$test_log"

for i in 1 2 3 4 5; do
	# The first cycle's cluster runs flannel as its primary CNI (flanneld
	# on each node, host-gw) with a second node: TestAddedNode proves its
	# pods reach node 1's and DNS over flannel's routes, TestCrossNode that
	# the proxies carry HTTP, gRPC and opaque TCP between the nodes over
	# mTLS with plexus-cni chained after flannel, TestPlexusctlUninstall
	# that uninstalling leaves flannel's conflist byte for byte, and
	# cluster-down must remove flannel's state too.
	if [ "$i" = 1 ]; then
		PLEXUS_CLUSTER_CNI=flannel "$HERE/cluster/up.sh" >/dev/null || die "cluster-up with flannel failed in cycle 1"
		"$HERE/cluster/node.sh" add 2 >/dev/null || die "node.sh add 2 failed in cycle 1 (flannel)"
		PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN PLEXUS_CLUSTER_ADDED_NODE=plexus-local-2 PLEXUS_CLUSTER_CNI=flannel \
			go test -count=1 -run TestAddedNode ./integration/localcluster || die "TestAddedNode failed in cycle 1 (flannel)"
		PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN PLEXUS_TEST_MULTINODE=1 \
			go test -count=1 -timeout 15m -run 'TestCrossNode$|TestPlexusctlUninstall$' ./integration/mesh ||
			die "TestCrossNode or TestPlexusctlUninstall failed in cycle 1 (flannel)"
	elif [ "$i" = 2 ]; then
		# Two clusters side by side (make cluster-up CLUSTERS=2), each with
		# a node: cluster a's down takes b down first, and the check after
		# the cycles covers b's leftovers too.
		"$HERE/cluster/up.sh" >/dev/null || die "cluster-up failed in cycle 2"
		PLEXUS_CLUSTER_NAME=b "$HERE/cluster/up.sh" >/dev/null || die "cluster-up of cluster b failed in cycle 2"
		(export_pair_env && PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN go test -count=1 -run TestClusterPair ./integration/localcluster) ||
			die "TestClusterPair failed in cycle 2"
		(export_pair_env && PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN go test -count=1 -run TestRemoteDiscoveryAgainstPair ./control/destination) ||
			die "TestRemoteDiscoveryAgainstPair failed in cycle 2"
		(export_pair_env && PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN go test -count=1 -timeout 20m -run 'TestMulticluster$' ./integration/mesh) ||
			die "TestMulticluster failed in cycle 2"
	else
		"$HERE/cluster/up.sh" >/dev/null || die "cluster-up failed in cycle $i"
	fi
	"$HERE/cluster/down.sh" || die "cluster-down failed in cycle $i"
done
PLEXUS_EXPECT_CLUSTER_DOWN=1 go test -count=1 -run TestTeardownLeavesNothing ./integration/localcluster
phase "five cluster-up/cluster-down cycles"
rm -f "$sysctls_before"
trap - EXIT
