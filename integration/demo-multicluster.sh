#!/usr/bin/env bash
# The multicluster demo on the two local clusters (make demo-multicluster
# brings them up, flat, and builds the images first): Plexus in both under
# one trust anchor, each with a trust domain of its own (a: cluster.local,
# b: b.cluster.local); the multicluster extension in both; a linked to b
# with plexusctl multicluster link; hello in b exported; a's client calling
# hello-b, answered by b's pods directly over mTLS; b's proxy naming a's
# client; a policy in b naming a's client; then, the networks
# hierarchical, the same through b's gateway; then hello-federated, one
# Service spanning hello in a and in b, and plexusctl stat --outbound
# showing a's client's requests by cluster.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
start=$SECONDS
B_KUBECONFIG=$(PLEXUS_CLUSTER_NAME=b bash -c 'source "$0" && echo "$KUBECONFIG_ADMIN"' "$HERE/cluster/env.sh")
B_CNI=$(PLEXUS_CLUSTER_NAME=b bash -c 'source "$0" && echo "$CNI_BIN_DIR $CNI_CONF_DIR"' "$HERE/cluster/env.sh")
read -r B_CNI_BIN B_CNI_CONF <<<"$B_CNI"
ka() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
kb() { "$KUBE_BIN/kubectl" --kubeconfig "$B_KUBECONFIG" "$@"; }
pa() { "$PLEXUS_ROOT/bin/plexusctl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
pb() { "$PLEXUS_ROOT/bin/plexusctl" --kubeconfig "$B_KUBECONFIG" "$@"; }
step() { log "$*"; }
[ "$("$HERE/cluster/pair.sh" mode)" = flat ] || die "the two clusters' network is not flat: make demo-multicluster (or integration/cluster/pair.sh mode flat)"

step "one trust anchor, an issuer per cluster, each for its own trust domain"
# Made once per pair of clusters and kept (in a's state, which
# cluster-down removes): running the demo again must not replace the
# anchors under running proxies.
pki=$STATE_DIR/demo-multicluster-pki
# issuer_files DIR: the issuer Secret plexus-control issuer printed on
# stdin, as the three files plexusctl install takes.
issuer_files() {
	local yaml
	yaml=$(cat)
	mkdir -p "$1"
	for k in ca.crt tls.crt tls.key; do
		# The Secret is the first document.
		echo "$yaml" | awk '/^---/ {exit} {print}' | awk -v k="  $k:" 'index($0, k) == 1 {print $2}' | base64 -d >"$1/$k"
		[ -s "$1/$k" ] || die "plexus-control issuer printed no $k"
	done
}
if [ ! -s "$pki/b/tls.key" ]; then
	rm -rf "$pki"
	mkdir -p "$pki"
	"$PLEXUS_ROOT/bin/plexus-control" issuer --trust-domain cluster.local --anchor-out "$pki/anchor" | issuer_files "$pki/a"
	"$PLEXUS_ROOT/bin/plexus-control" issuer --trust-domain b.cluster.local --anchor-cert "$pki/anchor/ca.crt" --anchor-key "$pki/anchor/ca.key" |
		issuer_files "$pki/b"
fi

step "installing Plexus in a and in b (b as b.cluster.local)"
install() { # CLI KUBECTL DIR CNI_BIN CNI_CONF [FLAGS...]
	local cli=$1 k=$2 dir=$3 bin=$4 conf=$5
	shift 5
	$cli install --cni-bin-dir="$bin" --cni-conf-dir="$conf" --identity-trust-anchors-file="$dir/ca.crt" \
		--identity-issuer-certificate-file="$dir/tls.crt" --identity-issuer-key-file="$dir/tls.key" "$@" |
		$k apply --server-side --force-conflicts -f - >/dev/null
}
install pa ka "$pki/a" "$CNI_BIN_DIR" "$CNI_CONF_DIR"
install pb kb "$pki/b" "$B_CNI_BIN" "$B_CNI_CONF" --trust-domain=b.cluster.local
for c in pa pb; do
	deadline=$((SECONDS + 180))
	until $c check >/tmp/plexus-check.out 2>&1; do
		[ $SECONDS -lt $deadline ] || { cat /tmp/plexus-check.out >&2; die "plexusctl check did not pass within 3 minutes"; }
		sleep 2
	done
done

step "the multicluster extension in both; a links to b"
pa multicluster install | ka apply -f - >/dev/null
pb multicluster install | kb apply -f - >/dev/null
ka -n plexus-multicluster rollout status deployment/plexus-service-mirror --timeout 120s >/dev/null
pb multicluster link --cluster-name b --api-server-address "https://$(PLEXUS_CLUSTER_NAME=b bash -c 'source "$0" && echo "$APISERVER_ADDR"' "$HERE/cluster/env.sh"):6443" |
	ka apply -f - >/dev/null
deadline=$((SECONDS + 60))
until pa multicluster check >/tmp/plexus-mc-check.out 2>&1; do
	[ $SECONDS -lt $deadline ] || { cat /tmp/plexus-mc-check.out >&2; die "plexusctl multicluster check did not pass within 60 s"; }
	sleep 1
done
sed 's/^/    /' /tmp/plexus-mc-check.out

step "hello in b (namespace mc-demo), exported; client in a"
for k in ka kb; do
	$k delete namespace mc-demo --ignore-not-found --wait=true >/dev/null
	$k create namespace mc-demo >/dev/null
	$k label namespace mc-demo plexus.dev/inject=enabled >/dev/null
done
kb -n mc-demo create deployment hello --image=plexus.dev/testapp:dev --replicas=2 -- /testapp serve :8080 >/dev/null
kb -n mc-demo expose deployment hello --port 80 --target-port 8080 >/dev/null
# client: an idle testapp running as service account client (the demo
# execs testapp load in it).
client() {
	cat <<'YAML'
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: mc-demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client, namespace: mc-demo}
spec:
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec:
      serviceAccountName: client
      containers: [{name: testapp, image: plexus.dev/testapp:dev, imagePullPolicy: Never, args: [serve, ":8080"]}]
YAML
}
client | ka apply -f - >/dev/null
kb -n mc-demo rollout status deployment/hello --timeout 180s >/dev/null
ka -n mc-demo rollout status deployment/client --timeout 180s >/dev/null
kb -n mc-demo label service hello mirror.plexus.dev/exported=remote-discovery >/dev/null
deadline=$((SECONDS + 10))
until ka -n mc-demo get service hello-b >/dev/null 2>&1; do
	[ $SECONDS -lt $deadline ] || die "no mirror hello-b in a within 10 s"
	sleep 0.2
done
echo
ka -n mc-demo get service hello-b -L multicluster.plexus.dev/remote-discovery | sed 's/^/    /'
echo

step "a's client calls hello-b: b's pods answer, pod to pod, over mTLS"
client=$(ka -n mc-demo get pods -l app=client -o jsonpath='{.items[0].metadata.name}')
answer=$(ka -n mc-demo exec "$client" -c testapp -- /testapp get http://hello-b.mc-demo.svc.cluster.local/ 2>&1 | tail -1)
echo "    $answer"
kb -n mc-demo get pods -l app=hello -o wide --no-headers | awk '{print "    b: " $1 " " $6}'
echo "$answer" | grep -q 'hello-' || die "hello-b did not answer from b: $answer"
hello=$(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[0].metadata.name}')
for p in $(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[*].metadata.name}'); do
	if kb -n mc-demo get --raw "/api/v1/namespaces/mc-demo/pods/$p:4191/proxy/metrics" | grep 'request_total{' | grep 'direction="inbound"' | grep -q 'client_id="spiffe://cluster.local/ns/mc-demo/sa/client"'; then
		hello=$p
	fi
done
echo "    b's $hello counts requests from:"
kb -n mc-demo get --raw "/api/v1/namespaces/mc-demo/pods/$hello:4191/proxy/metrics" | grep 'request_total{' | grep 'direction="inbound"' |
	grep -o 'client_id="[^"]*"' | sort -u | sed 's/^/      /'

step "a policy in b admits a's client (spiffe://cluster.local/...), not b's own sa/client"
kb apply -f - >/dev/null <<'EOF'
apiVersion: policy.plexus.dev/v1alpha1
kind: Server
metadata: {name: hello, namespace: mc-demo}
spec: {podSelector: {matchLabels: {app: hello}}, port: 8080, proxyProtocol: HTTP/1}
---
apiVersion: policy.plexus.dev/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: client-in-a, namespace: mc-demo}
spec: {identities: ["spiffe://cluster.local/ns/mc-demo/sa/client"]}
---
apiVersion: policy.plexus.dev/v1alpha1
kind: AuthorizationPolicy
metadata: {name: hello, namespace: mc-demo}
spec:
  targetRef: {group: policy.plexus.dev, kind: Server, name: hello}
  requiredAuthenticationRefs: [{group: policy.plexus.dev, kind: MeshTLSAuthentication, name: client-in-a}]
EOF
sleep 2
# statuses KUBECTL POD URL: the statuses of 5 requests from POD to URL.
statuses() { $1 -n mc-demo exec "$2" -c testapp -- /testapp load -n 5 "$3" | tr -d ' \n' | grep -o '"statuses":{[^}]*}'; }
fromA=$(statuses ka "$client" http://hello-b.mc-demo.svc.cluster.local/)
echo "    a's client: $fromA"
[ "$fromA" = '"statuses":{"200":5}' ] || die "b's policy did not admit a's client"
client | kb apply -f - >/dev/null
kb -n mc-demo rollout status deployment/client --timeout 180s >/dev/null
bclient=$(kb -n mc-demo get pods -l app=client -o jsonpath='{.items[0].metadata.name}')
fromB=$(statuses kb "$bclient" http://hello.mc-demo.svc.cluster.local/)
echo "    b's own client (spiffe://b.cluster.local/ns/mc-demo/sa/client): $fromB"
[ "$fromB" = '"statuses":{"403":5}' ] || die "b's policy admitted b's own sa/client"

step "gateway mode: the networks hierarchical (a's pods reach b's nodes only), hello exported through b's gateway"
trap '"$HERE/cluster/pair.sh" mode flat >/dev/null 2>&1 || true' EXIT
"$HERE/cluster/pair.sh" mode hierarchical >/dev/null
kb -n mc-demo label --overwrite service hello mirror.plexus.dev/exported=gateway >/dev/null
deadline=$((SECONDS + 10))
until [ "$(ka -n mc-demo get service hello-b -o jsonpath='{.metadata.labels.multicluster\.plexus\.dev/gateway}')" = b ]; do
	[ $SECONDS -lt $deadline ] || die "hello-b not in gateway mode within 10 s"
	sleep 0.2
done
echo "    b's gateway, as a reaches it: $(ka -n plexus-multicluster get secret cluster-credentials-b -o jsonpath='{.metadata.annotations.multicluster\.plexus\.dev/gateway-address}')"
deadline=$((SECONDS + 30))
until fromA=$(statuses ka "$client" http://hello-b.mc-demo.svc.cluster.local/) && [ "$fromA" = '"statuses":{"200":5}' ]; do
	[ $SECONDS -lt $deadline ] || die "a's client did not reach hello-b through b's gateway: $fromA"
	sleep 1
done
echo "    a's client through the gateway, under b's policy naming it: $fromA"
echo "    plexusctl multicluster gateways (in a):"
pa multicluster gateways | sed 's/^/      /'
gw=$(kb -n plexus-multicluster get pods -l app.kubernetes.io/name=plexus-gateway -o jsonpath='{.items[0].metadata.name}')
echo "    b's gateway (it passes a's mTLS through, unread):"
kb get --raw "/api/v1/namespaces/plexus-multicluster/pods/$gw:9993/proxy/metrics" | grep '^plexus_gateway_connections_total' | grep -v ' 0$' | sed 's/^/      /'
echo "    b's hello pods still name the caller:"
for p in $(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[*].metadata.name}'); do
	kb -n mc-demo get --raw "/api/v1/namespaces/mc-demo/pods/$p:4191/proxy/metrics" | grep 'request_total{' | grep 'direction="inbound"' |
		grep -o 'client_id="[^"]*"' | sort -u | sed "s/^/      $p: /"
done
kb -n mc-demo label --overwrite service hello mirror.plexus.dev/exported=remote-discovery >/dev/null
"$HERE/cluster/pair.sh" mode flat >/dev/null

step "a federated Service: hello in a too, exported as federated in both clusters: hello-federated spans their pods"
ka -n mc-demo create deployment hello --image=plexus.dev/testapp:dev --replicas=2 -- /testapp serve :8080 >/dev/null
ka -n mc-demo expose deployment hello --port 80 --target-port 8080 >/dev/null
ka -n mc-demo rollout status deployment/hello --timeout 180s >/dev/null
for k in ka kb; do $k -n mc-demo label --overwrite service hello mirror.plexus.dev/exported=federated >/dev/null; done
deadline=$((SECONDS + 10))
until [ "$(ka -n mc-demo get service hello-federated -o jsonpath='{.metadata.annotations.multicluster\.plexus\.dev/federated-clusters}' 2>/dev/null)" = b ]; do
	[ $SECONDS -lt $deadline ] || die "no hello-federated spanning b in a within 10 s"
	sleep 0.2
done
echo
ka -n mc-demo get service hello-federated -L multicluster.plexus.dev/federated | sed 's/^/    /'
echo
servers=$(ka -n mc-demo exec "$client" -c testapp -- /testapp load -n 100 -c 4 http://hello-federated.mc-demo.svc.cluster.local/ | tr -d ' \n' | grep -o '"servers":{[^}]*}')
echo "    100 requests from a's client to hello-federated, by pod:"
for p in $(ka -n mc-demo get pods -l app=hello -o jsonpath='{.items[*].metadata.name}'); do
	n=$(echo "$servers" | grep -o "\"$p\":[0-9]*" | cut -d: -f2)
	echo "      a: $p ${n:-0}"
done
for p in $(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[*].metadata.name}'); do
	n=$(echo "$servers" | grep -o "\"$p\":[0-9]*" | cut -d: -f2)
	echo "      b: $p ${n:-0}"
done
echo "$servers" | grep -q "$(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[0].metadata.name}')\|$(kb -n mc-demo get pods -l app=hello -o jsonpath='{.items[1].metadata.name}')" ||
	die "hello-federated sent nothing to b: $servers"
echo "    (when b goes silent, a's destination withdraws b's pods within 2 s: TestMulticluster measures it)"
echo
echo "    plexusctl stat deploy/client --outbound (in a), while the client calls hello-federated at 50 req/s:"
ka -n mc-demo exec "$client" -c testapp -- /testapp load -rate 50 -duration 7s -c 4 http://hello-federated.mc-demo.svc.cluster.local/ >/dev/null &
loader=$!
sleep 1
pa stat deploy/client -n mc-demo --outbound --window 5s | sed 's/^/    /'
wait "$loader" || die "the load behind plexusctl stat --outbound failed"

log "multicluster demo done in $((SECONDS - start))s: a and b stay up, flat (make cluster-down takes both down)"
