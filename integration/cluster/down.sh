#!/usr/bin/env bash
# Tears the local cluster down: stops every process it started (by PID),
# its pods' processes and containerd shims, unmounts and removes its network
# namespaces, bridge, iptables chains, cgroups, the node address on lo and
# its files, and restores the sysctls it changed. Safe to run at any point,
# also after a failed or interrupted cluster-up, and when nothing is running.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
source "$HERE/lib.sh"

[ "$(id -u)" = 0 ] || die "cluster-down needs root"
[ "${1:-}" = --locked ] || take_lock

# stop NAME...: SIGTERM to every named component at once, SIGKILL to those
# still running 5 s later. Nothing they store outlives the cluster, so a
# short grace is enough.
stop() {
	local name pid pids="" i
	for name in "$@"; do
		pid=$(pid_of "$name")
		rm -f "$PID_DIR/$name.pid"
		[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && pids="$pids $pid"
	done
	for i in $(seq 1 50); do
		for pid in $pids; do kill -0 "$pid" 2>/dev/null && break; pid=""; done
		[ -z "$pid" ] && return 0
		sleep 0.1
	done
	for pid in $pids; do kill -KILL "$pid" 2>/dev/null && log "pid $pid did not stop on SIGTERM; killed"; done
	return 0
}

# pod_netns prints the network namespace of every pod sandbox containerd
# knows, read from the sandboxes' OCI specs.
pod_netns() {
	local id
	[ -S "$CONTAINERD_SOCK" ] || return 0
	for id in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
		ctr --address "$CONTAINERD_SOCK" -n k8s.io containers info "$id" 2>/dev/null |
			grep -o '"/var/run/netns/[^"]*"\|"/run/netns/[^"]*"' | tr -d '"'
	done | sort -u
}

# kill_pods kills every process in the kubelet's pod cgroups.
kill_pods() {
	local procs
	procs=$(find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
	[ -n "$procs" ] || return 0
	# shellcheck disable=SC2086
	kill -KILL $procs 2>/dev/null || true
}

# kill_shims kills the containerd shims serving this cluster's containerd,
# and orphaned shims whose containerd socket is gone (a run killed before
# its cluster-down, possibly from another checkout).
kill_shims() {
	local pid addr
	for pid in $(pgrep -f "containerd-shim.*-address $CONTAINERD_SOCK" 2>/dev/null); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for pid in $(pgrep -f "containerd-shim.*-address " 2>/dev/null); do
		# A shim may exit between pgrep and here: the redirection's own
		# error is silenced too.
		addr=$( { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -A1 -x -- -address | tail -n +2)
		[ -n "$addr" ] && [ ! -S "$addr" ] && kill -KILL "$pid" 2>/dev/null
	done
	return 0
}

remove_chains() {
	local cmd table chain
	for cmd in iptables ip6tables; do
		command -v "$cmd" >/dev/null || continue
		for table in nat filter mangle; do
			# Jumps from built-in chains into cluster chains first, then the chains.
			"$cmd-save" -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE|CNI|FLANNEL|PLXMC)-' |
				sed 's/^-A/-D/' | while read -r rule; do
				# shellcheck disable=SC2086
				"$cmd" -w -t "$table" $rule 2>/dev/null
			done
			for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\|FLANNEL\|PLXMC\)-[^ ]*\) .*/\1/p'); do
				"$cmd" -w -t "$table" -F "$chain" 2>/dev/null
			done
			for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\|FLANNEL\|PLXMC\)-[^ ]*\) .*/\1/p'); do
				"$cmd" -w -t "$table" -X "$chain" 2>/dev/null
			done
		done
	done
}

remove_cgroups() {
	local dir
	for dir in /sys/fs/cgroup/*/kubepods; do
		[ -d "$dir" ] || continue
		find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null
		[ -d "$dir" ] && log "could not remove cgroup $dir (processes still in it?)"
	done
}

# orphan_pod_netns prints the containerd-named (cni-*) network namespaces
# that no process is in: pod sandboxes of a cluster whose processes were
# killed without a cluster-down, which no state dir recorded.
orphan_pod_netns() {
	local used f ino
	used=$(stat -L -c %i /proc/[0-9]*/ns/net 2>/dev/null | sort -u)
	for f in /run/netns/cni-*; do
		[ -e "$f" ] || continue
		ino=$(stat -L -c %i "$f" 2>/dev/null) || continue
		grep -qxF "$ino" <<<"$used" || echo "$f"
	done
}

# remove_stale_runtime_files removes what an earlier run killed before its
# cluster-down left in the runtime's fixed directories, which that run's
# successor then counted as the host's own: libcni results of this
# cluster's network (and containerd's loopback results of the same
# sandboxes), and shim sockets no process is bound to any more.
remove_stale_runtime_files() {
	local f id
	for f in /var/lib/cni/results/plexus-local-*-eth0; do
		[ -e "$f" ] || continue
		id=${f#/var/lib/cni/results/plexus-local-}
		id=${id%-eth0}
		rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
	done
	for f in /run/containerd/s/*; do
		[ -S "$f" ] || continue
		grep -qF " $f" /proc/net/unix || rm -f "$f"
	done
	return 0
}

# remove_host_node stops and removes a's node 1, the host's, and what the
# cluster changed on the host (b has no node there, and must leave a's
# alone).
remove_host_node() {
	local netns ns name d
	netns=$(pod_netns)
	stop flanneld kube-proxy kubelet
	kill_pods
	sleep 0.2
	kill_shims
	stop containerd kube-scheduler kube-controller-manager kube-apiserver etcd
	kill_shims

	# Pod network namespaces: those containerd named, and any cni-* netns that
	# appeared after cluster-up started (covers a containerd that already died).
	if [ -f "$STATE_DIR/netns.before" ]; then
		netns="$netns $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' | grep -vxF -f "$STATE_DIR/netns.before" | sed 's#^#/run/netns/#')"
	fi
	netns="$netns $(orphan_pod_netns)"
	for ns in $netns; do
		name=$(basename "$ns")
		umount "/run/netns/$name" 2>/dev/null
		ip netns delete "$name" 2>/dev/null || rm -f "/run/netns/$name"
	done

	[ -x "$KUBE_BIN/kube-proxy" ] && "$KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1
	remove_chains
	ip link delete "$BRIDGE" 2>/dev/null
	# The node address goes even when this state dir did not record it (a
	# cluster from another checkout, or a session killed mid-run, left it).
	ip addr delete "$(cat "$STATE_DIR/lo.addr" 2>/dev/null || echo "$NODE_IP/32")" dev lo 2>/dev/null
	ip addr delete "$NODE_IP/32" dev lo 2>/dev/null
	if [ -f "$STATE_DIR/sysctls.saved" ]; then
		while IFS= read -r kv; do sysctl -qw "$kv" >/dev/null; done <"$STATE_DIR/sysctls.saved"
	fi
	remove_cgroups
	if [ -f "$STATE_DIR/foreign.before" ]; then
		for d in $FOREIGN_DIRS; do
			[ -d "$d" ] || continue
			find "$d" -mindepth 1 -maxdepth 1 | grep -vxF -f "$STATE_DIR/foreign.before" | xargs -r rm -rf
			# A directory that did not exist before the cluster goes too.
			grep -qxF "$d" "$STATE_DIR/foreign.before" || rmdir -p "$d" 2>/dev/null
		done
	fi
	remove_stale_runtime_files
}

unmount_under() {
	local dir=$1 m
	for m in $(awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
	done
}

# Cluster b first (a's down takes it along): b's nodes and pods route
# through a's host, and b could not come up again without a.
if [ "$CLUSTER_NAME" = a ] && { [ -d "${PLEXUS_CLUSTER_B_STATE_DIR:-$PLEXUS_ROOT/.cluster-b}" ] || [ -d /run/plexus-cluster-b ]; }; then
	PLEXUS_CLUSTER_NAME=b "$HERE/down.sh" || log "cluster b's cluster-down failed"
fi

[ -d "$STATE_DIR" ] || [ -d "$RUN_DIR" ] || { log "no local cluster${CP_NETNS:+ $CLUSTER_NAME} to tear down"; exit 0; }
log "tearing down the local cluster${CP_NETNS:+ $CLUSTER_NAME}"
pause_cluster cont # a stopped process takes no SIGTERM, a frozen one no SIGKILL (pause.sh)

"$HERE/node.sh" remove-all --locked # the nodes node.sh added, first
if $HOST_NODE; then
	remove_host_node
else
	stop kube-scheduler kube-controller-manager kube-apiserver etcd
	ip netns del "$CP_NETNS" 2>/dev/null
	# The namespace may outlive its last process a while (the kernel
	# frees it when nothing refers to it); its veth must go now, or the
	# next cluster-up finds it.
	ip link del "$CP_VETH" 2>/dev/null || true
	"$HERE/pair.sh" remove
	kill_shims
fi
unmount_under "$RUN_DIR"
unmount_under "$STATE_DIR"

# Keep the logs of the last cluster for a post-mortem, outside the state.
if [ -d "$LOG_DIR" ]; then
	rm -rf "$LAST_LOG_DIR" && mv "$LOG_DIR" "$LAST_LOG_DIR"
fi
rm -rf "$STATE_DIR" "$RUN_DIR"
log "local cluster is down (last logs: $LAST_LOG_DIR)"
