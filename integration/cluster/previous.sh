#!/usr/bin/env bash
# Builds the previous Plexus (PREVIOUS_COMMIT in versions.mk) for the upgrade
# tests, cached by commit in PREVIOUS_DIR: its plexusctl and plexus-cni in
# bin/, and its images, tagged plexus.dev/NAME:prev, in images/. With the
# local cluster up, it also imports those images into every node's
# containerd.
# The build needs the commit in this clone's history (exit code 3 when it
# is not there).
set -euo pipefail
source "$(dirname "$0")/env.sh"

build() {
	[ -f "$PREVIOUS_DIR/.complete" ] && return 0
	# Exit code 3: this clone lacks the commit (a shallow clone).
	git -C "$PLEXUS_ROOT" cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null || {
		log "error: commit $PREVIOUS_COMMIT (PREVIOUS_COMMIT) is not in this clone's history"
		exit 3
	}
	[ -x "$PLEXUS_ROOT/bin/imagebuild" ] || die "bin/imagebuild is missing: run make build"
	log "building the previous Plexus ($PREVIOUS_COMMIT) into $PREVIOUS_DIR (cold: ~3 min on 2 cores)"
	local tmp="$PREVIOUS_DIR.tmp" name
	rm -rf "$tmp" && mkdir -p "$tmp/src" "$tmp/bin" "$tmp/images"
	git -C "$PLEXUS_ROOT" archive "$PREVIOUS_COMMIT" | tar -x -C "$tmp/src"
	(cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off go build -trimpath -ldflags '-s -w' -o "$tmp/bin/" \
		./control/cmd/plexus-control ./control/cmd/plexusctl ./sidecar/cmd/plexus-proxy \
		./daemonset/cmd/plexus-node ./cni-plugin/cmd/plexus-cni) || die "building $PREVIOUS_COMMIT failed"
	for name in plexus-control plexus-proxy; do
		"$PLEXUS_ROOT/bin/imagebuild" -tag "plexus.dev/$name:prev" -o "$tmp/images/$name.tar" \
			-file "/$name=$tmp/bin/$name" -entrypoint "/$name"
	done
	# shellcheck disable=SC2046 # one argument per word
	"$PLEXUS_ROOT/bin/imagebuild" -tag plexus.dev/plexus-node:prev -o "$tmp/images/plexus-node.tar" \
		-file "/plexus-node=$tmp/bin/plexus-node" -file "/opt/plexus/bin/plexus-cni=$tmp/bin/plexus-cni" \
		$("$PLEXUS_ROOT/integration/imagebuild/iptables-files.sh") -entrypoint /plexus-node
	rm -rf "$tmp/src" "$PREVIOUS_DIR" && mv "$tmp" "$PREVIOUS_DIR" && touch "$PREVIOUS_DIR/.complete"
}

build
# Every node's containerd: node 1's, and those of the nodes node.sh added.
for sock in "$CONTAINERD_SOCK" "$RUN_DIR"/nodes/*/containerd/containerd.sock; do
	[ -S "$sock" ] || continue
	for tar in "$PREVIOUS_DIR"/images/*.tar; do
		ctr --address "$sock" -n k8s.io images import --no-unpack "$tar" >/dev/null ||
			die "importing $tar into the local cluster's containerd ($sock) failed"
	done
done
echo "$PREVIOUS_DIR"
