#!/usr/bin/env bash
# Regenerates the Go code for mesh/api/*/*.proto with pinned generators:
# protoc from Debian (protobuf-compiler, checked below), protoc-gen-go at the
# google.golang.org/protobuf version go.mod requires, and protoc-gen-go-grpc
# at PROTOC_GEN_GO_GRPC_VERSION. Output is byte-identical for the same
# versions. Usage: mesh/api/gen.sh (make proto).
set -euo pipefail
PROTOC_VERSION="libprotoc 3.21.12"
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

cd "$(dirname "$0")/../.."
have="$(protoc --version 2>/dev/null || true)"
[ "$have" = "$PROTOC_VERSION" ] ||
	{ echo "gen.sh: need protoc '$PROTOC_VERSION' (Debian protobuf-compiler), have '${have:-none}'" >&2; exit 1; }

tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
GOBIN="$tools" go install google.golang.org/protobuf/cmd/protoc-gen-go
GOBIN="$tools" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"

for proto in mesh/api/*/*.proto; do
	PATH="$tools:$PATH" protoc -I . -I /usr/include \
		--go_out=. --go_opt=module=github.com/plexus-mesh/plexus \
		--go-grpc_out=. --go-grpc_opt=module=github.com/plexus-mesh/plexus \
		"$proto"
done
