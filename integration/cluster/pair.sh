#!/usr/bin/env bash
# How the two local clusters (a and b: make cluster-up CLUSTERS=2) reach
# each other. Their pods and nodes have routes to the other cluster's
# networks, all through the host, the one router between them; the host's
# rules here make the network between the clusters one of three kinds:
#
#	pair.sh mode isolated      no pod reaches the other cluster (b's
#	                           cluster-up starts here, unless
#	                           PLEXUS_MC_MODE says otherwise)
#	pair.sh mode flat          pods reach the other cluster's pods and
#	                           nodes at their own addresses, both ways
#	pair.sh mode hierarchical  pods reach the other cluster's nodes only
#	                           (its API server, NodePorts), their source
#	                           masqueraded to the host's address there,
#	                           as a node masquerades what leaves its
#	                           cluster; pod to pod is refused
#	pair.sh mode               prints the current mode
#	pair.sh remove             the rules gone (b's cluster-down)
#
# A refused packet gets ICMP network unreachable: a connect fails at once,
# as with no route. Known leak: the host itself (a's node 1's host-network
# processes) reaches b's pods in every mode. b's pods reach the host (its
# daemons listen on every address) only where a's nodes are reachable:
# flat, at any address; hierarchical, at a's node address.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PLEXUS_CLUSTER_NAME=a source "$HERE/env.sh"

[ "$(id -u)" = 0 ] || die "pair.sh needs root"

# Cluster a's networks, and b's (PEER_*: env.sh).
A_PODS=$CLUSTER_POD_CIDR A_NODES=$NODES_CIDR B_PODS=$PEER_POD_CIDR B_NODES=$PEER_NODES_CIDR
MODE_FILE=${PLEXUS_CLUSTER_B_STATE_DIR:-$PLEXUS_ROOT/.cluster-b}/pair-mode

# The chains, and where they are jumped to from.
CHAINS="filter:PLXMC-FWD:FORWARD filter:PLXMC-IN:INPUT nat:PLXMC-POST:POSTROUTING"

ipt() { iptables -w "$@"; }

remove() {
	local c table chain from
	for c in $CHAINS; do
		IFS=: read -r table chain from <<<"$c"
		while ipt -t "$table" -D "$from" -j "$chain" 2>/dev/null; do :; done
		ipt -t "$table" -F "$chain" 2>/dev/null || true
		ipt -t "$table" -X "$chain" 2>/dev/null || true
	done
}

# refuse SRC DST: pods of SRC get network unreachable for DST.
refuse() { ipt -A PLXMC-FWD -s "$1" -d "$2" -j REJECT --reject-with icmp-net-unreachable; }

set_mode() {
	local mode=$1 c table chain from
	case $mode in isolated | flat | hierarchical) ;; *) die "mode $mode: want isolated, flat or hierarchical" ;; esac
	[ -d "$(dirname "$MODE_FILE")" ] || die "no cluster b (make cluster-up CLUSTERS=2)"
	for c in $CHAINS; do
		IFS=: read -r table chain from <<<"$c"
		ipt -t "$table" -N "$chain" 2>/dev/null || ipt -t "$table" -F "$chain"
		ipt -t "$table" -C "$from" -j "$chain" 2>/dev/null || ipt -t "$table" -I "$from" 1 -j "$chain"
	done
	# Answers to what the host itself opened (the known leak) pass.
	ipt -A PLXMC-IN -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
	case $mode in
	isolated)
		refuse "$A_PODS" "$B_PODS"
		refuse "$A_PODS" "$B_NODES"
		refuse "$B_PODS" "$A_PODS"
		refuse "$B_PODS" "$A_NODES"
		# The host is a's node 1, whose daemons (its API server on every
		# address) b's pods would reach at any of its addresses.
		ipt -A PLXMC-IN -s "$B_PODS" -j REJECT --reject-with icmp-net-unreachable
		;;
	hierarchical)
		# b's pods reach a's node 1 at its node address only, as any of a's
		# nodes; the host's other addresses are not a node's.
		ipt -A PLXMC-IN -s "$B_PODS" ! -d "$A_NODES" -j REJECT --reject-with icmp-net-unreachable
		# What was sent to a node's address (a NodePort) and translated to a
		# pod's here passes: it was decided on the node's address.
		ipt -A PLXMC-FWD -m conntrack --ctstate DNAT -j RETURN
		refuse "$A_PODS" "$B_PODS"
		refuse "$B_PODS" "$A_PODS"
		ipt -t nat -A PLXMC-POST -s "$A_PODS" -m conntrack --ctorigdst "$B_NODES" -j MASQUERADE
		ipt -t nat -A PLXMC-POST -s "$B_PODS" -m conntrack --ctorigdst "$A_NODES" -j MASQUERADE
		;;
	flat) ;;
	esac
	echo "$mode" >"$MODE_FILE"
	log "clusters a and b: $mode"
}

case ${1:-} in
mode)
	if [ $# -eq 1 ]; then
		cat "$MODE_FILE" 2>/dev/null || die "no cluster b (make cluster-up CLUSTERS=2)"
	else
		set_mode "$2"
	fi
	;;
remove) remove ;;
*) die "usage: pair.sh mode [isolated|flat|hierarchical] | remove" ;;
esac
