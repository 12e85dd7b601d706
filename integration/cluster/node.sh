#!/usr/bin/env bash
# Adds nodes to the running local cluster, or removes them: node N (2-9;
# 1-9 in cluster b, which has no node on the host: env.sh) is its own
# kubelet, containerd and kube-proxy in its own network and
# mount namespaces, joined to the one control plane. The mount namespace
# keeps every path string of node 1 and binds the node's own directories
# over the ones a DaemonSet or the runtime writes (the CNI bin and conf
# dirs, /var/lib/cni, the node agent's /var/lib/plexus, /run/netns), so
# one hostPath serves every node.
# Node N is 10.213.0.N on a host bridge, its pods 10.244.(N-1).0/24 routed
# through it (b's: 10.214.0.N, 10.245.(N-1).0/24); its zone is zone-b for
# even N, else zone-a (node 1's).
#
#	node.sh add [--locked] [--cni-not-ready] N...
#	                       start nodes N... (cluster-up first); with
#	                       --cni-not-ready they register with the taint
#	                       plexus.dev/cni-not-ready:NoSchedule, as a node
#	                       image built for Plexus does, until the node
#	                       agent has installed the plugin on them;
#	                       --locked: the caller holds the cluster's lock
#	                       and has its control plane up (b's cluster-up)
#	node.sh ensure COUNT   nodes 2..COUNT running and Ready, adding (or
#	                       replacing) those that are not (make cluster-up NODES=COUNT)
#	node.sh remove N...    stop them and remove all they made
#	node.sh remove-all     every added node (cluster-down runs it)
#	node.sh isolate N...   cut nodes N... off the network as a machine that
#	                       lost power is: its link down, so what is sent to
#	                       it or from it vanishes (no reset; once the host's
#	                       ARP entry for it expires, a few seconds later,
#	                       senders get "no route to host", as on a LAN)
#	node.sh reconnect N... bring them back (their link up)
#
# make test adds nodes 2 and 3 and runs the cluster suite on the three
# (integration/test.sh); TestNodeJoinsTainted adds node 9 with
# --cni-not-ready.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
source "$HERE/lib.sh"

[ "$(id -u)" = 0 ] || die "node.sh needs root"
# The primary CNI cluster-up ran with (env.sh).
CLUSTER_CNI=$(cat "$STATE_DIR/primary-cni" 2>/dev/null || echo bridge)

# vars N: the names and paths of node N.
vars() {
	N=$1
	NAME=$CLUSTER_ID-$N
	IP=$NODES_NET.$N
	PODCIDR=$POD_NET.$((N - 1)).0/24
	PODGW=$POD_NET.$((N - 1)).1
	VETH=$VETH_PREFIX$N
	ND=$STATE_DIR/nodes/$NAME
	NR=$RUN_DIR/nodes/$NAME
	NETNS=plexus-$NAME
	MNT=$NR/ns/mnt
	SOCK=$NR/containerd/containerd.sock
	CG=$NAME
	ZONE=zone-$([ $((N % 2)) = 0 ] && echo b || echo a)
}

remove() {
	# A stopped node (pause.sh) goes on first: a stopped process takes no
	# SIGTERM, a frozen one no SIGKILL.
	[ -f "/sys/fs/cgroup/freezer/$CG/freezer.state" ] && { echo THAWED >"/sys/fs/cgroup/freezer/$CG/freezer.state"; } 2>/dev/null || true
	for c in flanneld kube-proxy kubelet containerd; do
		pid=$(cat "$ND/pids/$c.pid" 2>/dev/null || true)
		[ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null && kill "$pid" 2>/dev/null || true
	done
	sleep 2
	for c in flanneld kube-proxy kubelet containerd; do
		pid=$(cat "$ND/pids/$c.pid" 2>/dev/null || true)
		[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	done
	# shims and pod processes left in the node's cgroups
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h$CG" ] || continue
		find "$h$CG" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
	done
	sleep 1
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h$CG" ] && find "$h$CG" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	umount -l "$MNT" 2>/dev/null || true
	umount -l "$NR/ns" 2>/dev/null || true
	ip netns del "$NETNS" 2>/dev/null || true
	ip link del "$VETH" 2>/dev/null || true
	ip route del "$PODCIDR" 2>/dev/null || true
	[ -z "$CP_NETNS" ] || ip -n "$CP_NETNS" route del "$PODCIDR" 2>/dev/null || true
	kubectl delete node "$NAME" --wait=false --request-timeout=5s >/dev/null 2>&1 || true
	rm -rf "$NR" "$ND"
	log "node $NAME removed"
}

add() {
	[ -f "$STATE_DIR/up.complete" ] || { $LOCKED && [ -f "$STATE_DIR/controlplane.complete" ]; } ||
		die "no local cluster${CP_NETNS:+ $CLUSTER_NAME}: make cluster-up first"
	[ -d "$ND" ] && die "node $NAME exists (node.sh remove $N)"
	# A node that fails to come up is taken apart again, not left half made.
	trap 'log "adding node $NAME failed; removing what it made"; remove' EXIT
	mkdir -p "$ND/netns" "$ND/pids" "$ND/logs" "$ND/cni/bin" "$ND/cni/net.d" "$ND/varlibcni" "$ND/varlibplexus" "$ND/kubelet/root" "$ND/kubelet/pod-logs" "$ND/containerd" "$NR/ns"
	# PKI: the node's kubelet client and serving certificates.
	(
		cd "$PKI_DIR"
		umask 077
		[ -f "kubelet-client-$N.crt" ] || cert "kubelet-client-$N" "/O=system:nodes/CN=system:node:$NAME" clientAuth
		[ -f "kubelet-$N.crt" ] || cert "kubelet-$N" "/CN=$NAME" serverAuth "DNS:$NAME,IP:$IP"
	)
	kubeconfig "$ND/kubelet.kubeconfig" "system:node:$NAME" "kubelet-client-$N" "https://$APISERVER_ADDR:$APISERVER_PORT"

	# Network: a host bridge for the nodes, the node's netns on it.
	netns_on_bridge "$NETNS" "$VETH" "$IP"
	# a's API server and node 1 are the host's lo address; b's API server
	# is on the bridge.
	! $HOST_NODE || ip -n "$NETNS" route add "$NODE_IP/32" via "$NODES_BRIDGE_IP"
	ip -n "$NETNS" route add "$CLUSTER_POD_CIDR" via "$NODES_BRIDGE_IP" # the other nodes' pods, through the host
	ip -n "$NETNS" route add "$SERVICE_CIDR" via "$NODES_BRIDGE_IP"
	ip -n "$NETNS" route add "$PEER_POD_CIDR" via "$NODES_BRIDGE_IP" # the other cluster's (pair.sh)
	ip -n "$NETNS" route add "$PEER_NODES_CIDR" via "$NODES_BRIDGE_IP"
	ip route replace "$PODCIDR" via "$IP"
	# b's API server calls webhooks and extension API servers at their pods'
	# addresses: straight to the node, as the pods answer.
	[ -z "$CP_NETNS" ] || ip -n "$CP_NETNS" route replace "$PODCIDR" via "$IP"
	ip netns exec "$NETNS" sysctl -qw net.ipv4.ip_forward=1
	ip netns exec "$NETNS" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || echo "bridge-nf-call-iptables not per netns"

	# Mount namespace: same path strings, the node's own directories.
	mount --bind "$NR/ns" "$NR/ns"
	mount --make-private "$NR/ns"
	touch "$MNT"
	unshare --mount="$MNT" --propagation slave true
	nsenter --mount="$MNT" -- sh -c "
		mount --bind '$ND/cni/bin' '$CNI_BIN_DIR'
		mount --bind '$ND/cni/net.d' '$CNI_CONF_DIR'
		mkdir -p /var/lib/cni && mount --bind '$ND/varlibcni' /var/lib/cni
		mkdir -p /var/lib/plexus && mount --bind '$ND/varlibplexus' /var/lib/plexus
		mkdir -p '$ND/netns' && mount --bind '$ND/netns' /run/netns && mount --make-shared /run/netns
	"

	# cgroups: the node's own root in every hierarchy (cgroup v1), as kind
	# does: two kubelets under one /kubepods would kill each other's pods.
	for h in /sys/fs/cgroup/*/; do
		[ -L "${h%/}" ] && continue
		mkdir -p "$h$CG"
		if [ -f "${h}cpuset.cpus" ]; then
			cat "${h}cpuset.cpus" >"$h$CG/cpuset.cpus"
			cat "${h}cpuset.mems" >"$h$CG/cpuset.mems"
		fi
	done
	cp "$STATE_DIR/kube-proxy.kubeconfig" "$ND/"

	# Node 1's configuration writers and starter, with node N's values:
	# its directories on the host (seen at node 1's paths inside its mount
	# namespace), its address, pods, certificate and cgroup root.
	(
		innode="nsenter --net=/run/netns/$NETNS --mount=$MNT --"
		STATE_DIR=$ND RUN_DIR=$NR CONTAINERD_SOCK=$SOCK LOG_DIR=$ND/logs PID_DIR=$ND/pids
		NODE_NAME=$NAME NODE_IP=$IP POD_CIDR=$PODCIDR POD_GATEWAY=$PODGW
		KUBELET_CERT=kubelet-$N KUBELET_CGROUP_ROOT=/$CG KUBELET_REGISTER_TAINT=$REGISTER_TAINT
		CNI_BIN_DIR=$ND/cni/bin CNI_CONF_DIR=$ND/cni/net.d write_cni_config
		write_containerd_config # its CNI dirs: node 1's paths, in the namespace
		# shellcheck disable=SC2086
		start containerd $innode containerd --config "$STATE_DIR/containerd/config.toml"
		wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
		import_images
		write_kubelet_config
		# shellcheck disable=SC2086
		start kubelet $innode "$KUBE_BIN/kubelet" --config "$STATE_DIR/kubelet/config.yaml" \
			--kubeconfig "$STATE_DIR/kubelet.kubeconfig" --root-dir "$STATE_DIR/kubelet/root" \
			--hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --node-labels "topology.kubernetes.io/zone=$ZONE"
		write_kube_proxy_config
		# shellcheck disable=SC2086
		start kube-proxy $innode "$KUBE_BIN/kube-proxy" --config "$STATE_DIR/kube-proxy.yaml"
		wait_node "$NAME" 60
		# shellcheck disable=SC2086
		[ "$CLUSTER_CNI" != flannel ] || start_flannel eth0 "$IP" $innode
	)
	trap - EXIT
	! $HOST_NODE || kubectl label node "$NODE_NAME" topology.kubernetes.io/zone=zone-a >/dev/null 2>&1 || true
	log "node $NAME is Ready ($IP, pods $PODCIDR, $ZONE; logs: $ND/logs)"
}

# wait_node NAME SECONDS: waits for the node to be Ready.
wait_node() {
	local deadline=$((SECONDS + $2))
	until node_ready "$1"; do
		[ "$SECONDS" -lt "$deadline" ] || die "node $1 not Ready after $2s; logs: $ND/logs"
		sleep 0.5
	done
}

cmd=${1:-}
shift || true
LOCKED=false
REGISTER_TAINT=
while [ "$cmd" = add ] && [ $# -gt 0 ]; do
	case $1 in
	--locked) LOCKED=true ;;
	--cni-not-ready) REGISTER_TAINT=plexus.dev/cni-not-ready ;;
	*) break ;;
	esac
	shift
done
# a's node 1 is this host.
FIRST_NODE=1
! $HOST_NODE || FIRST_NODE=2
node_number() {
	[[ $1 =~ ^[1-9]$ ]] && [ "$1" -ge "$FIRST_NODE" ] ||
		die "node number $1: want $FIRST_NODE to 9$($HOST_NODE && echo ' (node 1 is this host)')"
}
case $cmd in
add | remove)
	[ $# -gt 0 ] || die "usage: node.sh $cmd N..."
	$LOCKED || take_lock
	for n in "$@"; do
		node_number "$n"
		vars "$n"
		"$cmd"
	done
	;;
ensure)
	[[ ${1:-} =~ ^[1-9]$ ]] || die "usage: node.sh ensure COUNT (1-9)"
	take_lock
	for ((n = FIRST_NODE; n <= $1; n++)); do
		vars "$n"
		if [ -d "$ND" ]; then
			node_ready "$NAME" && continue
			log "node $NAME is not Ready; replacing it"
			remove
		fi
		add
	done
	;;
isolate | reconnect)
	[ $# -gt 0 ] || die "usage: node.sh $cmd N..."
	for n in "$@"; do
		node_number "$n"
		vars "$n"
		[ -d "$ND" ] || die "no node $NAME"
		state=down
		[ "$cmd" = reconnect ] && state=up
		ip link set "$VETH" "$state"
		log "node $NAME: link $state"
	done
	;;
remove-all)
	[ "${1:-}" = --locked ] || take_lock
	for d in "$STATE_DIR/nodes/$CLUSTER_ID"-*; do
		[ -d "$d" ] || continue
		vars "${d##*-}"
		remove
	done
	ip link del "$NODES_BRIDGE" 2>/dev/null || true
	;;
*) die "usage: node.sh add [--locked] [--cni-not-ready] N... | ensure COUNT | remove N... | remove-all | isolate N... | reconnect N..." ;;
esac
