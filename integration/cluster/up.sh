#!/usr/bin/env bash
# Brings up a real single-node Kubernetes on this machine: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
# kubelet, kube-proxy and CoreDNS (and flanneld with
# PLEXUS_CLUSTER_CNI=flannel). With PLEXUS_CLUSTER_NAME=b, a second
# cluster beside that one (env.sh): its control plane in a network
# namespace of its own and its node 1 a node.sh node. Reuses a healthy
# running cluster; replaces a broken one; tears down whatever it started
# if any step fails.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
source "$HERE/lib.sh"

[ "$(id -u)" = 0 ] || die "cluster-up needs root (it runs kubelet and containerd)"
if ! $HOST_NODE; then
	[ -f "$PLEXUS_ROOT/.cluster/up.complete" ] || die "cluster $CLUSTER_NAME needs cluster a up first (make cluster-up)"
	[ "$CLUSTER_CNI" = bridge ] || die "cluster $CLUSTER_NAME runs the bridge CNI only, not $CLUSTER_CNI"
fi
take_lock

if cluster_healthy && [ "$(cat "$STATE_DIR/primary-cni" 2>/dev/null)" = "$CLUSTER_CNI" ]; then
	log "reusing the running cluster; refreshing every node's images from $IMAGES_DIR"
	import_images_all
	[ -z "${PLEXUS_MC_MODE:-}" ] || $HOST_NODE || "$HERE/pair.sh" mode "$PLEXUS_MC_MODE"
	print_env
	exit 0
fi
if [ -e "$STATE_DIR" ] || [ -e "$RUN_DIR" ]; then
	log "replacing a cluster that is stopped, partial or unhealthy"
	"$HERE/down.sh" --locked
fi
check_ports
if ! $HOST_NODE; then
	for l in "$NODES_BRIDGE" "$CP_VETH"; do
		! ip link show "$l" >/dev/null 2>&1 || die "link $l exists: another cluster $CLUSTER_NAME? (cluster-down)"
	done
	! ip netns pids "$CP_NETNS" >/dev/null 2>&1 || die "network namespace $CP_NETNS exists: another cluster $CLUSTER_NAME? (cluster-down)"
fi

# start_host_node: a's node 1, the host: CNI, containerd with the images,
# kubelet, kube-proxy (and flanneld).
start_host_node() {
	write_cni_config
	write_containerd_config
	start containerd containerd --config "$STATE_DIR/containerd/config.toml"
	wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
	import_images

	write_kubelet_config
	start kubelet "$KUBE_BIN/kubelet" --config "$STATE_DIR/kubelet/config.yaml" \
		--kubeconfig "$STATE_DIR/kubelet.kubeconfig" --root-dir "$STATE_DIR/kubelet/root" \
		--hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
	write_kube_proxy_config
	start kube-proxy "$KUBE_BIN/kube-proxy" --config "$STATE_DIR/kube-proxy.yaml"

	wait_for kubelet 60 node_ready
	if [ "$CLUSTER_CNI" = flannel ]; then
		ensure_nodes_bridge # node 1's address for the other nodes' flanneld routes
		start_flannel "$NODES_BRIDGE" "$NODES_BRIDGE_IP"
	fi
}

up_complete=false
failed_at=""
trap 'failed_at="${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND"' ERR
on_exit() {
	local rc=$?
	$up_complete && return
	[ -n "$failed_at" ] && log "failed step: $failed_at"
	log "cluster-up failed; tearing down what it started"
	"$HERE/down.sh" --locked >&2 || true
	exit $((rc == 0 ? 1 : rc))
}
trap on_exit EXIT
trap 'log "interrupted"; exit 130' INT TERM

mkdir -p "$STATE_DIR" "$LOG_DIR" "$PID_DIR" "$RUN_DIR" "$CNI_BIN_DIR" "$CNI_CONF_DIR"
echo "$CLUSTER_CNI" >"$STATE_DIR/primary-cni" # node.sh gives its nodes the same
"$HERE/pki.sh"
write_kubeconfigs
if $HOST_NODE; then
	# What the host looked like, for cluster-down (b changes none of it).
	save_sysctls
	snapshot_foreign_dirs
	share_netns_dir
	ip netns list 2>/dev/null | awk '{print $1}' >"$STATE_DIR/netns.before"

	sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
	# replace, not add: an address left by a killed earlier run is not an error.
	ip addr replace "$NODE_IP/32" dev lo
	echo "$NODE_IP/32" >"$STATE_DIR/lo.addr"
	CP=
else
	# b's control plane's network namespace, on b's nodes' bridge at
	# APISERVER_ADDR; node.sh adds a route to each node's pods.
	netns_on_bridge "$CP_NETNS" "$CP_VETH" "$APISERVER_ADDR"
	ip -n "$CP_NETNS" route add "$PEER_POD_CIDR" via "$NODES_BRIDGE_IP" # a's pods and nodes (pair.sh)
	ip -n "$CP_NETNS" route add "$PEER_NODES_CIDR" via "$NODES_BRIDGE_IP"
	"$HERE/pair.sh" mode "${PLEXUS_MC_MODE:-isolated}"
	CP="nsenter --net=/run/netns/$CP_NETNS --"
fi

# The control plane (b's run in its namespace: nsenter execs them, so the
# PIDs recorded are theirs).
# shellcheck disable=SC2086
start etcd $CP "$KUBE_BIN/etcd" --name "$NODE_NAME" --data-dir "$STATE_DIR/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "$NODE_NAME=http://127.0.0.1:$ETCD_PEER_PORT" \
	--listen-metrics-urls "" --log-level warn
# shellcheck disable=SC2086
wait_for etcd 30 $CP curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

# shellcheck disable=SC2086
start kube-apiserver $CP "$KUBE_BIN/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--bind-address 0.0.0.0 --secure-port "$APISERVER_PORT" --advertise-address "$APISERVER_ADDR" \
	--service-cluster-ip-range "$SERVICE_CIDR" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--allow-privileged=true --anonymous-auth=false \
	--client-ca-file "$PKI_DIR/ca.crt" \
	--tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key" \
	--kubelet-client-certificate "$PKI_DIR/apiserver-kubelet-client.crt" \
	--kubelet-client-key "$PKI_DIR/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$PKI_DIR/ca.crt" \
	--kubelet-preferred-address-types InternalIP \
	--service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
	--service-account-key-file "$PKI_DIR/sa.pub" \
	--service-account-signing-key-file "$PKI_DIR/sa.key" \
	--requestheader-client-ca-file "$PKI_DIR/front-proxy-ca.crt" \
	--requestheader-allowed-names front-proxy-client \
	--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
	--requestheader-extra-headers-prefix X-Remote-Extra- \
	--proxy-client-cert-file "$PKI_DIR/front-proxy-client.crt" --proxy-client-key-file "$PKI_DIR/front-proxy-client.key" \
	--enable-aggregator-routing=true --profiling=false
wait_for kube-apiserver 60 kubectl get --raw /readyz

# shellcheck disable=SC2086
start kube-controller-manager $CP "$KUBE_BIN/kube-controller-manager" \
	--kubeconfig "$STATE_DIR/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$STATE_DIR/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$STATE_DIR/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
	--service-account-private-key-file "$PKI_DIR/sa.key" --root-ca-file "$PKI_DIR/ca.crt" \
	--cluster-signing-cert-file "$PKI_DIR/ca.crt" --cluster-signing-key-file "$PKI_DIR/ca.key" \
	--service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
# shellcheck disable=SC2086
start kube-scheduler $CP "$KUBE_BIN/kube-scheduler" \
	--kubeconfig "$STATE_DIR/scheduler.kubeconfig" \
	--authentication-kubeconfig "$STATE_DIR/scheduler.kubeconfig" \
	--authorization-kubeconfig "$STATE_DIR/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --profiling=false

if $HOST_NODE; then
	start_host_node
	node1=kubelet
else
	touch "$STATE_DIR/controlplane.complete"
	"$HERE/node.sh" add --locked 1
	node1=kube-apiserver # node.sh watches the node's own
fi
apply_coredns
wait_for "$node1" 120 kubectl -n kube-system rollout status deployment/coredns --timeout 5s

touch "$STATE_DIR/up.complete"
up_complete=true
log "cluster is up (logs: $LOG_DIR)"
print_env
