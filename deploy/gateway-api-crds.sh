#!/usr/bin/env bash
# Copies the Gateway API CRDs Plexus installs (HTTPRoute and GRPCRoute,
# standard channel, nothing else) verbatim from the sigs.k8s.io/gateway-api
# module that go.mod requires into deploy/crds/gateway-api/. Never edit the
# copies: change the module version in go.mod and run `make gateway-crds`;
# deploy's TestGatewayAPICRDsMatchModule fails while they differ.
set -euo pipefail
cd "$(dirname "$0")/.."

FILES="gateway.networking.k8s.io_httproutes.yaml gateway.networking.k8s.io_grpcroutes.yaml"

mod=$(go mod download -json sigs.k8s.io/gateway-api >/dev/null && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
[ -n "$mod" ] || { echo "gateway-api-crds: sigs.k8s.io/gateway-api is not in go.mod" >&2; exit 1; }
for f in $FILES; do
	install -m 0644 "$mod/config/crd/standard/$f" "deploy/crds/gateway-api/$f"
done
echo "deploy/crds/gateway-api: $(go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api) standard channel"
