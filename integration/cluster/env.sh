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
GOLANGCI_LINT_BIN=$CACHE_DIR/golangci-lint/$GOLANGCI_LINT_VERSION/golangci-lint
PREVIOUS_DIR=$CACHE_DIR/previous/$PREVIOUS_COMMIT
IMAGES_DIR=$PLEXUS_ROOT/images

# Everything a running cluster owns lives under STATE_DIR, except what the
# kernel or containerd insists on keeping elsewhere (RUN_DIR, cgroups,
# network namespaces), and cluster-down removes all of it.
STATE_DIR=${STATE_DIR:-$PLEXUS_ROOT/.cluster}
RUN_DIR=/run/plexus-cluster
CONTAINERD_SOCK=$RUN_DIR/containerd/containerd.sock
PKI_DIR=$STATE_DIR/pki
LOG_DIR=$STATE_DIR/logs
LAST_LOG_DIR=$PLEXUS_ROOT/.cluster-logs # the last cluster's logs, kept after cluster-down
PID_DIR=$STATE_DIR/pids
KUBECONFIG_ADMIN=$STATE_DIR/kubeconfig
CNI_BIN_DIR=$STATE_DIR/cni/bin
CNI_CONF_DIR=$STATE_DIR/cni/net.d

NODE_NAME=${NODE_NAME:-plexus-local}
# The node's address: an extra /32 on lo, reachable from pods through the
# bridge gateway, never routed off the machine.
NODE_IP=10.213.0.1
POD_CIDR=10.244.0.0/24
# Every node's pods (node N has 10.244.N-1.0/24) and every node's address
# (node N is 10.213.0.N): integration/cluster/node.sh adds nodes.
CLUSTER_POD_CIDR=10.244.0.0/16
NODES_CIDR=10.213.0.0/24
# The kubelet's serving certificate in PKI_DIR, and its cgroup root (empty:
# the kubelet's default); node.sh sets both for the nodes it adds.
KUBELET_CERT=kubelet
KUBELET_CGROUP_ROOT=
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local
BRIDGE=plexusbr0
# The primary CNI the cluster is brought up with: bridge (a bridge with
# host-local addresses) or flannel (flanneld on every node, host-gw, and
# flannel's own CNI plugin in kube-flannel's conflist). cluster-up records
# it in $STATE_DIR/primary-cni; node.sh reads it from there.
CLUSTER_CNI=${PLEXUS_CLUSTER_CNI:-bridge}
# flanneld's kubeconfig (every node's: the API server at node 1's address).
FLANNEL_KUBECONFIG=$STATE_DIR/flannel.kubeconfig
# The bridge on the host that node.sh's nodes hang on, with the host's (node
# 1's) address on it; flannel's node 1 announces that address.
NODES_BRIDGE=plexusnodes0
NODES_BRIDGE_IP=10.213.0.254

ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=6443
# Ports the components listen on; cluster-up refuses to start if any is taken.
CLUSTER_PORTS="$ETCD_CLIENT_PORT $ETCD_PEER_PORT $APISERVER_PORT 10248 10249 10250 10256 10257 10259"

SANDBOX_IMAGE=registry.k8s.io/pause:3.10

# Sysctls cluster-up changes; cluster-down puts back what it found.
CLUSTER_SYSCTLS="net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"

# The cluster's daemons in start order; cluster-down stops them in reverse.
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

# export_test_env exports what the Go tests read to reach the local cluster
# and the binaries under test (make test, make bench-cluster).
export_test_env() {
	export PLEXUS_CLUSTER_STATE_DIR=$STATE_DIR PLEXUS_CLUSTER_RUN_DIR=$RUN_DIR
	export PLEXUS_CLUSTER_NODE_NAME=$NODE_NAME PLEXUS_CLUSTER_NODE_IP=$NODE_IP PLEXUS_CLUSTER_BRIDGE=$BRIDGE
	export PLEXUS_TEST_KUBECONFIG=$KUBECONFIG_ADMIN PLEXUS_KUBECTL=$KUBE_BIN/kubectl PLEXUS_CNI_REF_PLUGINS=$CNI_REF_BIN
	export PLEXUS_KUBE_BIN=$KUBE_BIN PLEXUS_HELM=$HELM_BIN
	export PLEXUS_CLUSTER_CNI_CONF_DIR=$CNI_CONF_DIR PLEXUS_CLUSTER_CNI_BIN_DIR=$CNI_BIN_DIR PLEXUS_CNI_BIN=$PLEXUS_ROOT/bin/plexus-cni
	export PLEXUS_PROXY_BIN=$PLEXUS_ROOT/bin/plexus-proxy PLEXUS_NODE_BIN=$PLEXUS_ROOT/bin/plexus-node
	export PLEXUS_CONTROL_BIN=$PLEXUS_ROOT/bin/plexus-control PLEXUSCTL_BIN=$PLEXUS_ROOT/bin/plexusctl
}
