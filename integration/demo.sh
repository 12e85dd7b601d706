#!/usr/bin/env bash
# The demo on a running local cluster (make demo brings it up first). For
# now: a two-pod HTTP exchange by Service name; the mesh issues extend it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
source "$HERE/cluster/lib.sh"

kubectl delete namespace plexus-demo --ignore-not-found --wait=true >/dev/null
kubectl apply -f "$HERE/demo/hello.yaml" >/dev/null
kubectl -n plexus-demo rollout status deployment/hello --timeout 120s >/dev/null
kubectl apply -f "$HERE/demo/client.yaml" >/dev/null
kubectl -n plexus-demo wait pod/client --for=jsonpath='{.status.phase}'=Succeeded --timeout 120s >/dev/null ||
	{ kubectl -n plexus-demo logs client >&2; die "the demo client did not succeed"; }
echo
echo "The client pod called the hello Service by name:"
kubectl -n plexus-demo logs client | sed 's/^/    /'
cat <<MSG

Explore:
    $(print_env | head -1)
    $(print_env | tail -1)
    kubectl get pods -A -o wide
Tear down:
    make cluster-down
MSG
