#!/usr/bin/env bash
# Stops this cluster's API server and nodes without a word, as a machine
# that froze would look from the other cluster, and lets them go on:
#
#	pause.sh stop   SIGSTOP to the API server and to each node's agents
#	                (kubelet, containerd, kube-proxy, flanneld), and every
#	                pod of the nodes frozen (the node's freezer cgroup)
#	pause.sh cont   all of it goes on
#
# Connections stay open and the kernel still accepts new ones: clients
# wait for answers that never come. etcd, the controller-manager and the
# scheduler keep running (waiting on the API server). TestMulticluster
# stops cluster b (PLEXUS_CLUSTER_NAME=b: issue 27's T5); cluster-down
# and node.sh let a stopped cluster go on before they stop it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
source "$HERE/lib.sh"

[ "$(id -u)" = 0 ] || die "pause.sh needs root"
[ -d "$STATE_DIR" ] || die "no local cluster${CP_NETNS:+ $CLUSTER_NAME}"
case ${1:-} in
stop | cont) pause_cluster "$1" ;;
*) die "usage: pause.sh stop|cont" ;;
esac
