# Settings shared by the local cluster scripts. Sourced, not run.
# Every value can be overridden from the environment.

PLEXUS_ROOT=${PLEXUS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# Versions come from versions.mk, the one place they are written.
eval "$(sed -n 's/^\([A-Z_]*\) ?= \(.*\)$/: "${\1:=\2}"/p' "$PLEXUS_ROOT/integration/cluster/versions.mk")"

# Built tools are cached per machine, outside the work tree, keyed by
# version, so a fresh clone (CI's) reuses what an earlier run built.
CACHE_DIR=${PLEXUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/plexus}
# etcd, Kubernetes, CoreDNS (the Corefile's plugins only) and Prometheus
# with promtool come from one build of integration/clusterdeps, keyed by
# its go.mod (which holds every version it builds).
CLUSTERDEPS_BIN=$CACHE_DIR/clusterdeps/$KUBE_VERSION-$(sha256sum "$PLEXUS_ROOT/integration/clusterdeps/go.mod" | cut -c1-12)
KUBE_BIN=$CLUSTERDEPS_BIN
COREDNS_BIN=$CLUSTERDEPS_BIN/coredns
PROMETHEUS_BIN=$CLUSTERDEPS_BIN
CNI_REF_BIN=$CACHE_DIR/cni-plugins/$CNI_PLUGINS_VERSION/bin
HELM_BIN=$CACHE_DIR/helm/$HELM_VERSION/helm
FLANNEL_BIN=$CACHE_DIR/flannel/$FLANNEL_VERSION-$FLANNEL_CNI_VERSION/bin
GOLANGCI_LINT_VERSION=v2.15.0
H2SPEC_VERSION=v2.2.1+incompatible
H2SPEC_BIN=$CACHE_DIR/h2spec/$H2SPEC_VERSION/h2spec
GOLANGCI_LINT_BIN=$CACHE_DIR/golangci-lint/$GOLANGCI_LINT_VERSION/golangci-lint
PREVIOUS_DIR=$CACHE_DIR/previous/$PREVIOUS_COMMIT
IMAGES_DIR=$PLEXUS_ROOT/images

# Which local cluster the settings are for. a is the one make cluster-up
# brings up: node 1 is this host. b is a second cluster beside it (make
# cluster-up CLUSTERS=2; multicluster/HARNESS.md), with no node on the
# host: its control plane runs in the network namespace CP_NETNS on its
# own nodes' bridge, and its nodes are all node.sh's, from node 1. The two
# share nothing but the machine: their nodes, pods and services have
# addresses of their own, and only the host routes between them.
CLUSTER_NAME=${PLEXUS_CLUSTER_NAME:-a}
case $CLUSTER_NAME in
a)
	STATE_DIR=${STATE_DIR:-$PLEXUS_ROOT/.cluster}
	RUN_DIR=/run/plexus-cluster
	LAST_LOG_DIR=$PLEXUS_ROOT/.cluster-logs # the last cluster's logs, kept after cluster-down
	CLUSTER_ID=plexus-local # kubeconfigs' cluster, the CAs' names, node.sh's nodes ($CLUSTER_ID-N)
	NODE_NAME=${NODE_NAME:-plexus-local}
	HOST_NODE=true
	CP_NETNS=
	CP_VETH=
	NODES_NET=10.213.0 # node N is $NODES_NET.N
	POD_NET=10.244     # node N's pods are $POD_NET.(N-1).0/24
	SERVICE_NET=10.96
	NODES_BRIDGE=plexusnodes0
	VETH_PREFIX=pn # node N's link on NODES_BRIDGE is $VETH_PREFIX$N
	PEER_NODES_NET=10.214.0 # the other cluster's (pair.sh)
	PEER_POD_NET=10.245
	;;
b)
	# STATE_DIR is a's when set: a's scripts call b's (cluster-down).
	STATE_DIR=${PLEXUS_CLUSTER_B_STATE_DIR:-$PLEXUS_ROOT/.cluster-b}
	RUN_DIR=/run/plexus-cluster-b
	LAST_LOG_DIR=$PLEXUS_ROOT/.cluster-b-logs
	CLUSTER_ID=plexus-b
	NODE_NAME=plexus-b-1
	HOST_NODE=false
	CP_NETNS=plexus-b-cp
	CP_VETH=pbcp # its link on NODES_BRIDGE: down, its API server is cut off
	NODES_NET=10.214.0
	POD_NET=10.245
	SERVICE_NET=10.97
	NODES_BRIDGE=plexusnodes1
	VETH_PREFIX=pnb
	PEER_NODES_NET=10.213.0
	PEER_POD_NET=10.244
	;;
*)
	printf '[cluster] error: unknown cluster %s (PLEXUS_CLUSTER_NAME: a or b)\n' "$CLUSTER_NAME" >&2
	exit 1
	;;
esac

# Everything a running cluster owns lives under STATE_DIR, except what the
# kernel or containerd insists on keeping elsewhere (RUN_DIR, cgroups,
# network namespaces), and cluster-down removes all of it.
CONTAINERD_SOCK=$RUN_DIR/containerd/containerd.sock
PKI_DIR=$STATE_DIR/pki
LOG_DIR=$STATE_DIR/logs
PID_DIR=$STATE_DIR/pids
KUBECONFIG_ADMIN=$STATE_DIR/kubeconfig
CNI_BIN_DIR=$STATE_DIR/cni/bin
CNI_CONF_DIR=$STATE_DIR/cni/net.d

# Node 1's address. a's is an extra /32 on the host's lo, reachable from
# pods through the bridge gateway, never routed off the machine; b's node
# 1 is node.sh's.
NODE_IP=$NODES_NET.1
POD_CIDR=$POD_NET.0.0/24
# Every node's pods (node N has $POD_NET.N-1.0/24) and every node's address
# (node N is $NODES_NET.N): integration/cluster/node.sh adds nodes.
CLUSTER_POD_CIDR=$POD_NET.0.0/16
NODES_CIDR=$NODES_NET.0/24
# The other cluster's pods and nodes: pods and nodes have routes to them,
# through the host, whose rules decide what passes (pair.sh).
PEER_POD_CIDR=$PEER_POD_NET.0.0/16
PEER_NODES_CIDR=$PEER_NODES_NET.0/24
# The kubelet's serving certificate in PKI_DIR, and its cgroup root (empty:
# the kubelet's default); node.sh sets both for the nodes it adds.
KUBELET_CERT=kubelet
KUBELET_CGROUP_ROOT=
POD_GATEWAY=$POD_NET.0.1
SERVICE_CIDR=$SERVICE_NET.0.0/16
KUBERNETES_SERVICE_IP=$SERVICE_NET.0.1
DNS_SERVICE_IP=$SERVICE_NET.0.10
CLUSTER_DOMAIN=cluster.local
BRIDGE=plexusbr0
# The primary CNI the cluster is brought up with: bridge (a bridge with
# host-local addresses) or flannel (flanneld on every node, host-gw, and
# flannel's own CNI plugin in kube-flannel's conflist). cluster-up records
# it in $STATE_DIR/primary-cni; node.sh reads it from there.
CLUSTER_CNI=${PLEXUS_CLUSTER_CNI:-bridge}
# flanneld's kubeconfig (every node's: the API server at node 1's address).
FLANNEL_KUBECONFIG=$STATE_DIR/flannel.kubeconfig
# The bridge on the host that node.sh's nodes hang on, with the host's
# address on it (a's node 1's; b's router to the other networks).
NODES_BRIDGE_IP=$NODES_NET.254
# The API server's address for nodes and pods: a's node 1's; b's control
# plane namespace's, on b's nodes' bridge.
if $HOST_NODE; then APISERVER_ADDR=$NODE_IP; else APISERVER_ADDR=$NODES_NET.250; fi

ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=6443
# Ports the components listen on; cluster-up refuses to start if any is
# taken. b's listen in their own network namespaces.
CLUSTER_PORTS="$ETCD_CLIENT_PORT $ETCD_PEER_PORT $APISERVER_PORT 10248 10249 10250 10256 10257 10259"
$HOST_NODE || CLUSTER_PORTS=

SANDBOX_IMAGE=registry.k8s.io/pause:3.10

# Sysctls cluster-up changes; cluster-down puts back what it found.
CLUSTER_SYSCTLS="net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"

# The cluster's daemons in start order; cluster-down stops them in reverse.
# b's nodes are node.sh's, with their own.
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy"
$HOST_NODE || COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

# export_test_env exports what the Go tests read to reach the local cluster
# and the binaries under test (make test, make bench-cluster).
export_test_env() {
	export PLEXUS_CLUSTER_STATE_DIR=$STATE_DIR PLEXUS_CLUSTER_RUN_DIR=$RUN_DIR
	export PLEXUS_CLUSTER_NODE_NAME=$NODE_NAME PLEXUS_CLUSTER_NODE_IP=$NODE_IP PLEXUS_CLUSTER_BRIDGE=$BRIDGE
	export PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN PLEXUS_KUBECTL=$KUBE_BIN/kubectl PLEXUS_CNI_REF_PLUGINS=$CNI_REF_BIN
	export PLEXUS_KUBE_BIN=$KUBE_BIN PLEXUS_HELM=$HELM_BIN PLEXUS_H2SPEC=$H2SPEC_BIN
	export PLEXUS_CLUSTER_CNI_CONF_DIR=$CNI_CONF_DIR PLEXUS_CLUSTER_CNI_BIN_DIR=$CNI_BIN_DIR PLEXUS_CNI_BIN=$PLEXUS_ROOT/bin/plexus-cni
	export PLEXUS_PROXY_BIN=$PLEXUS_ROOT/bin/plexus-proxy PLEXUS_NODE_BIN=$PLEXUS_ROOT/bin/plexus-node
	export PLEXUS_CONTROL_BIN=$PLEXUS_ROOT/bin/plexus-control PLEXUSCTL_BIN=$PLEXUS_ROOT/bin/plexusctl
}

# export_pair_env exports what the Go tests read to reach cluster b as
# well (make cluster-up CLUSTERS=2).
export_pair_env() {
	local b
	b=$(PLEXUS_CLUSTER_NAME=b bash -c 'source "$0" && echo "$KUBECONFIG_ADMIN $STATE_DIR $CNI_CONF_DIR $CNI_BIN_DIR $NODE_NAME"' "$PLEXUS_ROOT/integration/cluster/env.sh")
	read -r PLEXUS_TEST_KUBECONFIG_B PLEXUS_TEST_B_STATE_DIR PLEXUS_TEST_B_CNI_CONF_DIR PLEXUS_TEST_B_CNI_BIN_DIR PLEXUS_TEST_B_NODE_NAME <<<"$b"
	export PLEXUS_TEST_KUBECONFIG_B PLEXUS_TEST_B_STATE_DIR PLEXUS_TEST_B_CNI_CONF_DIR PLEXUS_TEST_B_CNI_BIN_DIR PLEXUS_TEST_B_NODE_NAME
}
