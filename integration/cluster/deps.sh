#!/usr/bin/env bash
# Installs and builds what the local cluster and the tests need, each step
# skipped when its result is already there:
#   apt:     Debian packages (containerd, runc, iptables, ...)
#   kube:    etcd, the Kubernetes components, CoreDNS (with the plugins its
#            Corefile uses) and the viz extension's Prometheus with promtool
#            (Kubernetes service discovery alone), built in one go build from
#            their Go modules by integration/clusterdeps
#   cni:     the CNI reference plugins
#   coredns, prometheus: the same as kube
#   flannel: flanneld and flannel's CNI plugin (make cluster-up CNI=flannel)
#   helm:    the Helm CLI, built from its Go module, for the charts' tests
#   chromium: Debian's headless browser, for the dashboard's browser tests
#            (integration/vizbrowser)
#   bench:   the peer proxies the benchmark compares against (nginx, HAProxy)
#   proto:   protoc, for make proto
#   lint:    golangci-lint, built from its Go module, for make lint
# Usage: deps.sh [apt] [kube] [cni] [coredns] [flannel] [prometheus] [helm] [chromium] [bench] [proto] [lint]
#        (no argument: all but bench and proto)
set -euo pipefail
source "$(dirname "$0")/env.sh"

APT_PACKAGES="containerd runc iptables iproute2 openssl conntrack procps util-linux curl ca-certificates"

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root"; }

# apt_install PACKAGE...: installs what is missing. Services are never
# started: a package's postinst must not leave a daemon (nginx on port 80,
# say) running in the machine's own network namespace.
apt_install() {
	local missing="" p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	need_root "installing Debian packages"
	log "installing Debian packages:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed"
	local policy=/usr/sbin/policy-rc.d had_policy=false
	[ -e "$policy" ] && had_policy=true
	if ! $had_policy; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
	fi
	local rc=0
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null || rc=$?
	$had_policy || rm -f "$policy"
	[ "$rc" = 0 ] || die "apt-get install$missing failed"
}

deps_apt() { apt_install $APT_PACKAGES; }
deps_bench() { apt_install nginx-light haproxy; }
deps_chromium() { apt_install chromium; }
# libprotobuf-dev holds the well-known types (google/protobuf/timestamp.proto).
deps_proto() { apt_install protobuf-compiler libprotobuf-dev; }

deps_kube() { build_clusterdeps; }

deps_cni() {
	[ -f "$CNI_REF_BIN/.complete" ] && return 0
	log "building CNI reference plugins $CNI_PLUGINS_VERSION into $CNI_REF_BIN"
	local tmp="$CNI_REF_BIN.tmp" p
	rm -rf "$tmp" && mkdir -p "$tmp"
	for p in main/bridge main/loopback main/ptp ipam/host-local meta/portmap; do
		GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
			"github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION" ||
			die "building CNI plugin $p $CNI_PLUGINS_VERSION failed"
	done
	rm -rf "$CNI_REF_BIN" && mv "$tmp" "$CNI_REF_BIN" && touch "$CNI_REF_BIN/.complete"
}

# go_install BIN PACKAGE@VERSION [LDFLAGS]: builds one static command from
# the Go module proxy into BIN (its cache path), unless it is there.
go_install() {
	local bin=$1 pkg=$2 ldflags="-s -w ${3:-}" dir
	[ -x "$bin" ] && return 0
	log "building $pkg (cold: a few minutes on 2 cores)"
	dir=$(dirname "$bin")
	mkdir -p "$dir/tmp"
	GOBIN="$dir/tmp" CGO_ENABLED=0 GOWORK=off go install -trimpath -ldflags "$ldflags" "$pkg" || die "building $pkg failed"
	mv "$dir/tmp/$(basename "${pkg%@*}")" "$bin" && rmdir "$dir/tmp"
}

# etcd, Kubernetes, CoreDNS (only the plugins its Corefile uses) and the
# viz extension's Prometheus with promtool (which checks its scrape config
# in the unit tests), from integration/clusterdeps in one build: they need
# the same Kubernetes client, gRPC, protobuf and OpenTelemetry packages,
# compiled once so. Debian's Prometheus is built without
# Kubernetes service discovery, which that config needs; the
# remove_all_sd tag drops the cloud providers'.
deps_coredns() { build_clusterdeps; }
deps_prometheus() { build_clusterdeps; }
build_clusterdeps() {
	[ -f "$CLUSTERDEPS_BIN/.complete" ] && return 0
	local dir=$PLEXUS_ROOT/integration/clusterdeps tmp=$CLUSTERDEPS_BIN.tmp v=${PROMETHEUS_VERSION#v0.} want
	for want in "k8s.io/kubernetes $KUBE_VERSION" "github.com/coredns/coredns $COREDNS_VERSION" \
		"github.com/prometheus/prometheus $PROMETHEUS_VERSION"; do
		grep -q "$want" "$dir/go.mod" || die "integration/clusterdeps/go.mod does not require $want"
	done
	# The module's v0.MMmm.p is Prometheus M.mm.p (v0.316.0: 3.16.0).
	local prom=$((${v%%.*} / 100)).$((${v%%.*} % 100)).${v#*.}
	local kmajor kminor
	kmajor=$(echo "$KUBE_VERSION" | cut -d. -f1 | tr -d v) kminor=$(echo "$KUBE_VERSION" | cut -d. -f2)
	local ldflags="-s -w -X github.com/prometheus/common/version.Version=$prom"
	ldflags="$ldflags -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
	ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=$kmajor -X k8s.io/component-base/version.gitMinor=$kminor"
	ldflags="$ldflags -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
	log "building etcd, Kubernetes $KUBE_VERSION, CoreDNS $COREDNS_VERSION and Prometheus $PROMETHEUS_VERSION into $CLUSTERDEPS_BIN (cold: ~8 min on 2 cores)"
	rm -rf "$tmp" && mkdir -p "$tmp"
	(cd "$dir" && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags "$ldflags" \
		-tags remove_all_sd,enable_kubernetes_sd -o "$tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl ./cmd/etcd ./cmd/coredns \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool) ||
		die "building integration/clusterdeps failed"
	rm -rf "$CLUSTERDEPS_BIN" && mv "$tmp" "$CLUSTERDEPS_BIN" && touch "$CLUSTERDEPS_BIN/.complete"
}

# flanneld from integration/flannel's module (cgo: its udp backend), and
# flannel's CNI plugin as the CNI plugins released it last.
deps_flannel() {
	[ -f "$FLANNEL_BIN/.complete" ] && return 0
	apt_install gcc libc6-dev
	log "building flannel $FLANNEL_VERSION and its CNI plugin ($FLANNEL_CNI_VERSION) into $FLANNEL_BIN (cold: ~2 min on 2 cores)"
	local tmp="$FLANNEL_BIN.tmp"
	rm -rf "$tmp" && mkdir -p "$tmp"
	grep -q "github.com/flannel-io/flannel $FLANNEL_VERSION" "$PLEXUS_ROOT/integration/flannel/go.mod" ||
		die "integration/flannel/go.mod does not require github.com/flannel-io/flannel $FLANNEL_VERSION"
	(cd "$PLEXUS_ROOT/integration/flannel" &&
		CGO_ENABLED=1 GOWORK=off go build -trimpath -o "$tmp/flanneld" \
			-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
			github.com/flannel-io/flannel) || die "building flannel $FLANNEL_VERSION failed"
	GOBIN="$tmp" CGO_ENABLED=0 GOWORK=off go install -trimpath -ldflags "-s -w" \
		"github.com/containernetworking/plugins/plugins/meta/flannel@$FLANNEL_CNI_VERSION" ||
		die "building flannel's CNI plugin $FLANNEL_CNI_VERSION failed"
	rm -rf "$FLANNEL_BIN" && mv "$tmp" "$FLANNEL_BIN" && touch "$FLANNEL_BIN/.complete"
}

# Helm, for the charts' lint, schema and render tests and helm install on
# the local cluster.
deps_helm() {
	go_install "$HELM_BIN" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
}

# h2spec, the HTTP/2 conformance suite, run through the mesh by the
# sidecar's netns tests (TestMeshH2Spec).
deps_h2spec() {
	go_install "$H2SPEC_BIN" "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION"
}

# golangci-lint, for make lint: the layer rules (depguard) and import
# grouping (.golangci.yml).
deps_lint() {
	go_install "$GOLANGCI_LINT_BIN" "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
}

steps=${*:-apt kube cni coredns flannel prometheus helm chromium h2spec}
for step in $steps; do
	case $step in
	apt | kube | cni | coredns | flannel | prometheus | helm | chromium | h2spec | bench | proto | lint) "deps_$step" ;;
	*) die "unknown step $step (want apt, kube, cni, coredns, flannel, prometheus, helm, chromium, h2spec, bench, proto or lint)" ;;
	esac
done
