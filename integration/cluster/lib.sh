# Functions the local cluster scripts share. Sourced after env.sh.

kubectl() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# take_lock makes sure only one cluster-up or cluster-down runs at a time.
take_lock() {
	mkdir -p "$(dirname "$RUN_DIR")"
	exec 9>"$RUN_DIR.lock"
	flock -n 9 || die "another cluster-up or cluster-down is running (lock $RUN_DIR.lock)"
}

pid_of() { cat "$PID_DIR/$1.pid" 2>/dev/null || true; }
alive() { local pid; pid=$(pid_of "$1"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

cluster_healthy() {
	[ -f "$STATE_DIR/up.complete" ] || return 1
	local c
	for c in $COMPONENTS; do alive "$c" || return 1; done
	kubectl get --raw /readyz >/dev/null 2>&1 && node_ready
}

# node_ready [NAME]: whether the node (default node 1) is Ready.
node_ready() {
	[ "$(kubectl get node "${1:-$NODE_NAME}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

check_ports() {
	local port owner
	for port in $CLUSTER_PORTS; do
		owner=$(ss -Hltnp "sport = :$port" 2>/dev/null | head -1)
		[ -z "$owner" ] || die "port $port is already in use, cannot start the cluster: $owner"
	done
}

# start NAME CMD...: runs a component in its own session, logging to
# $LOG_DIR/NAME.log, and records its PID for cluster-down.
start() {
	local name=$1
	shift
	log "starting $name (log: $LOG_DIR/$name.log)"
	# fd 9 is the cluster lock: components must not hold it.
	setsid "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$PID_DIR/$name.pid"
}

# wait_for NAME SECONDS CMD...: waits until CMD succeeds, failing early if
# component NAME exits, and naming the component and its log on failure.
wait_for() {
	local name=$1 timeout=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$name"; then
			tail -n 20 "$LOG_DIR/$name.log" >&2 || true
			die "$name exited during startup; log: $LOG_DIR/$name.log"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$LOG_DIR/$name.log" >&2 || true
			die "$name not ready after ${timeout}s (waiting for: $*); log: $LOG_DIR/$name.log"
		fi
		sleep 0.5
	done
}

# Directories the runtime writes to whatever its configuration says: libcni's
# result cache and containerd's shim sockets. cluster-up lists them first so
# cluster-down removes exactly what the cluster added.
FOREIGN_DIRS="/var/lib/cni/results /run/containerd/s"

snapshot_foreign_dirs() {
	local d
	for d in $FOREIGN_DIRS; do
		if [ -d "$d" ]; then
			echo "$d"
			find "$d" -mindepth 1 -maxdepth 1
		fi
	done >"$STATE_DIR/foreign.before"
}

save_sysctls() {
	local k
	for k in $CLUSTER_SYSCTLS; do
		echo "$k=$(sysctl -n "$k")"
	done >"$STATE_DIR/sysctls.saved"
}

# kubeconfig FILE USER CERT SERVER: a kubeconfig using a client certificate.
kubeconfig() {
	local file=$1 user=$2 cert=$3 server=$4
	cat >"$file" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_ID
  cluster:
    certificate-authority: $PKI_DIR/ca.crt
    server: $server
users:
- name: $user
  user:
    client-certificate: $PKI_DIR/$cert.crt
    client-key: $PKI_DIR/$cert.key
contexts:
- name: $user@$CLUSTER_ID
  context: {cluster: $CLUSTER_ID, user: $user}
current-context: $user@$CLUSTER_ID
YAML
	chmod 600 "$file"
}

# write_kubeconfigs: the control plane's components reach the API server
# on their loopback (b's in their namespace), the nodes at APISERVER_ADDR,
# and the admin on the host at whichever of the two it can reach.
write_kubeconfigs() {
	local local_server="https://127.0.0.1:$APISERVER_PORT" node_server="https://$APISERVER_ADDR:$APISERVER_PORT"
	local admin_server=$local_server
	$HOST_NODE || admin_server=$node_server
	kubeconfig "$KUBECONFIG_ADMIN" admin admin "$admin_server"
	kubeconfig "$STATE_DIR/controller-manager.kubeconfig" kube-controller-manager controller-manager "$local_server"
	kubeconfig "$STATE_DIR/scheduler.kubeconfig" kube-scheduler scheduler "$local_server"
	kubeconfig "$STATE_DIR/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client "$node_server"
	kubeconfig "$STATE_DIR/kube-proxy.kubeconfig" kube-proxy kube-proxy "$node_server"
	kubeconfig "$FLANNEL_KUBECONFIG" admin admin "$node_server"
}

# The primary network, CLUSTER_CNI's: a bridge with host-local addresses
# (bridge) or flannel's plugin delegating to one (flannel), with only the
# cluster's own routes (pods, services, the nodes) and the other local
# cluster's (pods, nodes: pair.sh decides what passes) -- no default route.
write_cni_config() {
	local p
	for p in bridge host-local loopback portmap; do
		cp "$CNI_REF_BIN/$p" "$CNI_BIN_DIR/$p"
	done
	case $CLUSTER_CNI in
	bridge) write_bridge_conflist ;;
	flannel) write_flannel_conflist ;;
	*) die "unknown primary CNI '$CLUSTER_CNI' (want bridge or flannel)" ;;
	esac
}

write_bridge_conflist() {
	cat >"$CNI_CONF_DIR/10-plexus-local.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "plexus-local",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$CLUSTER_POD_CIDR"}, {"dst": "$NODES_CIDR"}, {"dst": "$NODE_IP/32"}, {"dst": "$PEER_POD_CIDR"}, {"dst": "$PEER_NODES_CIDR"}],
        "dataDir": "$STATE_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

# kube-flannel's conflist (spec 0.3.1, flannel then portmap), with the
# files flannel keeps in the cluster's own directories, the cluster's
# bridge, no masquerading (pods see each other's addresses across nodes)
# and the routes above: flannel adds the pod network's.
write_flannel_conflist() {
	cp "$FLANNEL_BIN/flannel" "$CNI_BIN_DIR/flannel"
	cat >"$CNI_CONF_DIR/10-flannel.conflist" <<JSON
{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "flannel",
      "subnetFile": "$RUN_DIR/flannel/subnet.env",
      "dataDir": "$STATE_DIR/cni/flannel",
      "delegate": {"bridge": "$BRIDGE", "hairpinMode": true, "isDefaultGateway": false, "ipMasq": false},
      "ipam": {
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$NODES_CIDR"}, {"dst": "$NODE_IP/32"}, {"dst": "$PEER_POD_CIDR"}, {"dst": "$PEER_NODES_CIDR"}],
        "dataDir": "$STATE_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

# start_flannel IFACE PUBLIC_IP [PREFIX...]: gives the node its pod CIDR
# (flannel's kube subnet manager reads Node.spec.podCIDR), starts flanneld
# (run by PREFIX, the node's nsenter) with the host-gw backend -- a route
# to each other node's pods via its address on the nodes' bridge -- and
# waits for the subnet file flannel's CNI plugin reads. flanneld runs as
# a node process, as k3s runs it, not as kube-flannel's DaemonSet: this
# cluster has no image registry to pull flannel's image from.
start_flannel() {
	local iface=$1 public_ip=$2
	shift 2
	kubectl patch node "$NODE_NAME" --type merge \
		-p "{\"spec\":{\"podCIDR\":\"$POD_CIDR\",\"podCIDRs\":[\"$POD_CIDR\"]}}" >/dev/null ||
		die "setting $NODE_NAME's pod CIDR failed"
	mkdir -p "$RUN_DIR/flannel" "$STATE_DIR/flannel"
	printf '{"Network": "%s", "Backend": {"Type": "host-gw"}}\n' "$CLUSTER_POD_CIDR" >"$STATE_DIR/flannel/net-conf.json"
	start flanneld "$@" env NODE_NAME="$NODE_NAME" "$FLANNEL_BIN/flanneld" --kube-subnet-mgr \
		--kubeconfig-file "$FLANNEL_KUBECONFIG" --iface "$iface" --public-ip "$public_ip" \
		--ip-masq=false --iptables-forward-rules=false \
		--net-config-path "$STATE_DIR/flannel/net-conf.json" --subnet-file "$RUN_DIR/flannel/subnet.env"
	wait_for flanneld 60 test -s "$RUN_DIR/flannel/subnet.env"
}

# ensure_nodes_bridge: the host bridge the nodes' network namespaces hang
# on, with the host's (node 1's) address on it.
ensure_nodes_bridge() {
	ip link show "$NODES_BRIDGE" >/dev/null 2>&1 && return 0
	ip link add "$NODES_BRIDGE" type bridge
	ip addr add "$NODES_BRIDGE_IP/24" dev "$NODES_BRIDGE"
	ip link set "$NODES_BRIDGE" up
}

# netns_on_bridge NETNS LINK ADDR: a network namespace NETNS with lo up and
# eth0 at ADDR (a /24) on NODES_BRIDGE, whose host end is LINK: a node's
# (node.sh) or b's control plane's (up.sh).
netns_on_bridge() {
	local netns=$1 link=$2 addr=$3
	ensure_nodes_bridge
	ip netns add "$netns"
	ip link add "$link" type veth peer name eth0 netns "$netns"
	ip link set "$link" master "$NODES_BRIDGE" up
	ip -n "$netns" link set lo up
	ip -n "$netns" addr add "$addr/24" dev eth0
	ip -n "$netns" link set eth0 up
}

write_containerd_config() {
	mkdir -p "$STATE_DIR/containerd"
	cat >"$STATE_DIR/containerd/config.toml" <<TOML
version = 2
root = "$STATE_DIR/containerd/root"
state = "$RUN_DIR/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN_DIR/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
TOML
}

# share_netns_dir makes /run/netns a shared mount of itself before
# containerd mounts pod network namespaces in it, as `ip netns add` does
# the first time it runs. Otherwise the first `ip netns add` after pods
# exist (a test's) binds /run/netns over itself and hides their netns
# mounts underneath, where nothing can unmount or remove them.
share_netns_dir() {
	mkdir -p /run/netns
	if ! mount --make-shared /run/netns 2>/dev/null; then
		mount --bind /run/netns /run/netns && mount --make-shared /run/netns ||
			die "cannot make /run/netns a shared mount"
	fi
}

import_images() {
	local tar
	for tar in "$IMAGES_DIR"/*.tar; do
		[ -e "$tar" ] || die "no images in $IMAGES_DIR; run 'make images' first"
		ctr --address "$CONTAINERD_SOCK" -n k8s.io images import --no-unpack "$tar" >>"$LOG_DIR/images.log" 2>&1 ||
			die "importing image $tar into containerd failed; log: $LOG_DIR/images.log"
	done
}

# import_images_all imports them into every running node's containerd:
# node 1's and those node.sh added (a reused cluster's nodes would
# otherwise keep the images they started with).
import_images_all() {
	local sock
	for sock in "$CONTAINERD_SOCK" "$RUN_DIR"/nodes/*/containerd/containerd.sock; do
		[ -S "$sock" ] || continue
		CONTAINERD_SOCK=$sock import_images
	done
}

# register_with_taints is the kubelet config's registerWithTaints for
# KUBELET_REGISTER_TAINT (a taint key, NoSchedule), or nothing.
register_with_taints() {
	[ -z "${KUBELET_REGISTER_TAINT:-}" ] || echo "registerWithTaints: [{key: $KUBELET_REGISTER_TAINT, effect: NoSchedule}]"
}

write_kubelet_config() {
	mkdir -p "$STATE_DIR/kubelet/root" "$STATE_DIR/kubelet/pod-logs"
	echo "nameserver $DNS_SERVICE_IP" >"$STATE_DIR/resolv.conf"
	cat >"$STATE_DIR/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI_DIR/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI_DIR/$KUBELET_CERT.crt
tlsPrivateKeyFile: $PKI_DIR/$KUBELET_CERT.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
${KUBELET_CGROUP_ROOT:+cgroupRoot: $KUBELET_CGROUP_ROOT}
$(register_with_taints)
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$DNS_SERVICE_IP]
resolvConf: $STATE_DIR/resolv.conf
podLogsDir: $STATE_DIR/kubelet/pod-logs
volumePluginDir: $STATE_DIR/kubelet/volume-plugins
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
staticPodPath: ""
YAML
}

write_kube_proxy_config() {
	cat >"$STATE_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE_DIR/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $CLUSTER_POD_CIDR
bindAddress: $NODE_IP
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: [$NODE_IP/32]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

apply_coredns() {
	sed -e "s/@DNS_SERVICE_IP@/$DNS_SERVICE_IP/g" -e "s/@CLUSTER_DOMAIN@/$CLUSTER_DOMAIN/g" \
		"$PLEXUS_ROOT/integration/cluster/coredns.yaml" | kubectl apply -f - >"$LOG_DIR/coredns-apply.log" 2>&1 ||
		die "applying CoreDNS manifests failed; log: $LOG_DIR/coredns-apply.log"
}

print_env() {
	echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
	echo "export PATH=$KUBE_BIN:\$PATH   # kubectl $KUBE_VERSION"
}

openssl_quiet() { openssl "$@" 2>/dev/null || { openssl "$@"; die "openssl $1 failed"; }; }

# cert NAME SUBJECT USAGE [SAN]: NAME.crt and NAME.key in the current
# directory (PKI_DIR), signed by the cluster CA there.
cert() {
	local name=$1 subject=$2 usage=$3 san=${4:-}
	openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "$subject" -keyout "$name.key" -out "$name.csr"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[ -n "$san" ] && echo "subjectAltName=$san"
	} >"$name.ext"
	openssl_quiet x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
		-days 365 -extfile "$name.ext" -out "$name.crt"
	rm -f "$name.csr" "$name.ext"
}

# pause_cluster stop|cont: SIGSTOP (or SIGCONT) to the API server and to
# every node's agents, and every pod of the nodes frozen (or thawed) by
# its node's freezer cgroup (pause.sh). cont is safe when nothing is
# stopped. Fails, naming it, when a cgroup does not reach the state.
pause_cluster() {
	local sig=STOP state=FROZEN pids dirs="" dir nd f c pid ok=0
	[ "$1" = cont ] && sig=CONT state=THAWED
	pids="$(pid_of kube-apiserver)"
	if $HOST_NODE; then
		for c in kubelet containerd kube-proxy flanneld; do pids="$pids $(pid_of $c)"; done
		dirs="/sys/fs/cgroup/freezer/kubepods"
	fi
	for nd in "$STATE_DIR"/nodes/*/; do
		[ -d "$nd" ] || continue
		for f in "$nd"pids/*.pid; do [ -f "$f" ] && pids="$pids $(cat "$f")"; done
		dirs="$dirs /sys/fs/cgroup/freezer/$(basename "$nd")"
	done
	for pid in $pids; do kill -"$sig" "$pid" 2>/dev/null || true; done
	for dir in $dirs; do
		[ -f "$dir/freezer.state" ] || continue
		echo "$state" >"$dir/freezer.state"
		for _ in $(seq 1 50); do
			[ "$(cat "$dir/freezer.state")" = "$state" ] && break
			sleep 0.1
		done
		[ "$(cat "$dir/freezer.state")" = "$state" ] || { log "cgroup $dir is $(cat "$dir/freezer.state"), not $state"; ok=1; }
	done
	return $ok
}
