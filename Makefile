# Plexus: build, images, the local cluster, tests and the demo.
# `make demo` runs the mesh end to end on a local cluster; `make test` runs
# every test. Both install what they need (they must run as root).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go

include integration/cluster/versions.mk

CLUSTER := integration/cluster
# The version binaries report (plexusctl version): the tag of the images.
VERSION ?= dev
# Where the cached CoreDNS binary is: env.sh is the one place that says.
COREDNS_BIN := $(shell bash -c 'source $(CLUSTER)/env.sh && echo $$COREDNS_BIN')
PROMETHEUS_BIN := $(shell bash -c 'source $(CLUSTER)/env.sh && echo $$PROMETHEUS_BIN')

# Our binaries: every <component>/cmd/<name> outside integration/.
COMMANDS := $(filter-out integration/%,$(wildcard */cmd/*))
BINARIES := $(notdir $(COMMANDS))
# plexus-cni runs on the node, not in a container: it ships inside plexus-node;
# plexusctl runs on the user's machine.
IMAGES := images/pause.tar images/testapp.tar images/demoapp.tar images/coredns.tar images/prometheus.tar \
	$(filter-out images/plexus-cni.tar images/plexusctl.tar,$(BINARIES:%=images/%.tar))

.PHONY: all build images deps cluster-up cluster-down test test-unit demo demo-multicluster bench bench-cluster bench-multicluster clean proto proto-check gateway-crds charts lint layers

all: build

# grpcnotrace leaves out gRPC's optional x/net/trace pages: they pull in
# text/template, whose reflection keeps every exported method in the
# binary (the proxy: 2.3 MB smaller, and that much less of it resident).
BUILD_TAGS ?= grpcnotrace

## build: static binaries of our commands and test tools in bin/
build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -tags '$(BUILD_TAGS)' -trimpath -ldflags '-s -w -X github.com/plexus-mesh/plexus/control/version.Version=$(VERSION)' -o bin/ ./integration/cmd/... $(COMMANDS:%=./%)

## images: docker-archive tarballs in images/ for the local cluster
images: build deps-coredns deps-prometheus
	@$(MAKE) --no-print-directory $(IMAGES)

images/pause.tar: bin/pause
	@mkdir -p images
	bin/imagebuild -tag registry.k8s.io/pause:3.10 -o $@ -file /pause=$< -entrypoint /pause -user 65535
images/testapp.tar: bin/testapp
	@mkdir -p images
	bin/imagebuild -tag plexus.dev/testapp:dev -o $@ -file /testapp=$< -entrypoint /testapp -user 65532
images/demoapp.tar: bin/demoapp
	@mkdir -p images
	bin/imagebuild -tag plexus.dev/demoapp:dev -o $@ -file /demoapp=$< -entrypoint /demoapp -user 65532
images/coredns.tar: $(COREDNS_BIN)
	@mkdir -p images
	bin/imagebuild -tag plexus.dev/coredns:dev -o $@ -file /coredns=$< -entrypoint /coredns -user 65532
# The node agent installs the CNI plugin from its own image, and repairs
# pods' rules with this machine's iptables (binaries, extensions, libraries).
images/plexus-node.tar: bin/plexus-node bin/plexus-cni integration/imagebuild/iptables-files.sh
	@mkdir -p images
	iptables=$$(integration/imagebuild/iptables-files.sh); \
	bin/imagebuild -tag plexus.dev/plexus-node:dev -o $@ -file /plexus-node=bin/plexus-node \
		-file /opt/plexus/bin/plexus-cni=bin/plexus-cni $$iptables -entrypoint /plexus-node
# The viz extension's Prometheus, built from its Go module (deps.sh prometheus).
images/prometheus.tar: $(PROMETHEUS_BIN)/prometheus
	@mkdir -p images
	bin/imagebuild -tag plexus.dev/prometheus:dev -o $@ -file /prometheus=$< -entrypoint /prometheus -user 65534
images/%.tar: bin/%
	@mkdir -p images
	bin/imagebuild -tag plexus.dev/$*:dev -o $@ -file /$*=$< -entrypoint /$*

## deps: Debian packages, Kubernetes, CNI reference plugins, CoreDNS, h2spec (cached by version);
## deps-bench: the peer proxies (nginx, HAProxy) the mesh benchmark compares against
deps:
	$(CLUSTER)/deps.sh
deps-%:
	$(CLUSTER)/deps.sh $*

## cluster-up / cluster-down: the local Kubernetes, one node unless
## NODES=N (2-9) adds nodes 2..N (integration/cluster/node.sh); CNI=flannel
## runs flannel as the primary CNI (default: CNI=bridge); CLUSTERS=2 brings
## up a second cluster, b, beside it with NODES_B nodes (default 1; its
## kubeconfig is .cluster-b/kubeconfig; cluster-down takes it down too),
## MC=isolated|flat|hierarchical the network between them (pair.sh)
# Only what the cluster and the demo run: Helm and Chromium are for the
# tests (make test brings them with deps).
NODES ?= 1
CNI ?= bridge
CLUSTERS ?= 1
NODES_B ?= 1
MC ?=
cluster-up: deps-apt deps-kube deps-cni images $(if $(filter flannel,$(CNI)),deps-flannel)
	PLEXUS_CLUSTER_CNI=$(CNI) $(CLUSTER)/up.sh
	$(CLUSTER)/node.sh ensure $(NODES)
	$(if $(filter 2,$(CLUSTERS)),PLEXUS_CLUSTER_NAME=b PLEXUS_MC_MODE=$(MC) $(CLUSTER)/up.sh && PLEXUS_CLUSTER_NAME=b $(CLUSTER)/node.sh ensure $(NODES_B))
cluster-down:
	$(CLUSTER)/down.sh

## test: the lint, unit tests, root/netns tests and the cluster integration tests
test: deps deps-bench images proto-check lint
	integration/test.sh

## lint: the layer rules and import grouping (.golangci.yml), unique package names
lint: deps-lint
	integration/lint.sh

## layers: the imports that break the layers of ARCHITECTURE.md (-a: every import across folders)
layers:
	integration/layers.sh

## test-unit: only the tests that need neither root nor a cluster
test-unit:
	$(GO) vet ./...
	$(GO) test ./...

## bench: every benchmark, with the local cluster for those that need it
bench: deps deps-bench images
	integration/bench.sh

## bench-cluster: the mesh pod to pod on the local cluster, meshed against unmeshed
bench-cluster: deps images
	integration/bench-cluster.sh

## bench-multicluster: across two local clusters, flat against through the gateway
bench-multicluster: deps images
	integration/bench-multicluster.sh

## demo: the mesh end to end on the local cluster
demo: cluster-up
	integration/demo.sh

## demo-multicluster: two local clusters, flat, linked: a calls b's pods
## over mTLS and b's policy names a's client; then the same through b's
## gateway, the networks hierarchical (make cluster-down takes both down)
demo-multicluster:
	$(MAKE) cluster-up CLUSTERS=2 MC=flat
	integration/demo-multicluster.sh

## proto: regenerate mesh/api from its .proto files with pinned generators;
## proto-check: fail if the committed generated code is not what they produce
proto: deps-proto
	mesh/api/gen.sh
proto-check: proto
	git diff --exit-code -- mesh/api || { echo 'mesh/api: generated code is stale; run make proto and commit' >&2; exit 1; }

## charts: regenerate deploy/charts' templates, values and schemas from deploy/
## (TestChartsUpToDate fails when they are stale)
charts:
	$(GO) run ./control/cli/install/chartgen deploy/charts

## gateway-crds: copy the HTTPRoute and GRPCRoute CRDs of the Gateway API
## module in go.mod into deploy/crds/gateway-api (never edit the copies)
gateway-crds:
	deploy/gateway-api-crds.sh

clean: cluster-down
	rm -rf bin images
