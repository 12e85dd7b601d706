#!/usr/bin/env bash
# The demo on the local cluster (make demo brings it up and builds the
# images first): installs Plexus with `plexusctl install | kubectl apply`,
# waits for `plexusctl check`, deploys the demo application into a
# namespace that opts into the mesh, and shows `plexusctl stat` with every
# edge meshed over mTLS.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/env.sh"
source "$HERE/cluster/lib.sh"
start=$SECONDS
PLEXUSCTL="$PLEXUS_ROOT/bin/plexusctl --kubeconfig $KUBECONFIG_ADMIN"

step() { log "$*"; }

step "installing Plexus (plexusctl install | kubectl apply --server-side)"
# The issuer is generated once and kept: re-running the demo must not
# replace the trust anchors under running proxies.
issuer_flags=()
if kubectl -n plexus-system get secret plexus-identity-issuer >/dev/null 2>&1; then
	keep=$(mktemp -d)
	trap 'rm -rf "$keep"' EXIT
	for k in ca.crt tls.crt tls.key; do
		kubectl -n plexus-system get secret plexus-identity-issuer -o "jsonpath={.data.${k//./\\.}}" | base64 -d >"$keep/$k"
	done
	issuer_flags=(--identity-trust-anchors-file="$keep/ca.crt" --identity-issuer-certificate-file="$keep/tls.crt"
		--identity-issuer-key-file="$keep/tls.key")
fi
$PLEXUSCTL install --cni-bin-dir="$CNI_BIN_DIR" --cni-conf-dir="$CNI_CONF_DIR" "${issuer_flags[@]}" |
	kubectl apply --server-side --force-conflicts -f - >/dev/null

step "waiting for plexusctl check"
deadline=$((SECONDS + 180))
until $PLEXUSCTL check >/tmp/plexus-check.out 2>&1; do
	[ $SECONDS -lt $deadline ] || { cat /tmp/plexus-check.out >&2; die "plexusctl check did not pass within 3 minutes"; }
	sleep 2
done
sed 's/^/    /' /tmp/plexus-check.out

step "deploying the demo application (namespace plexus-demo, injected), and the viz extension beside it"
kubectl delete namespace plexus-demo --ignore-not-found --wait=true >/dev/null
kubectl apply -f "$HERE/demo/app.yaml" >/dev/null
# The viz extension comes up while the demo runs; its step below waits for it.
$PLEXUSCTL viz install | kubectl apply -f - >/dev/null
for d in books votes web load; do
	kubectl -n plexus-demo rollout status "deployment/$d" --timeout 180s >/dev/null ||
		{ kubectl -n plexus-demo describe pods >&2; die "deployment $d did not become ready"; }
done

# all_meshed STAT says why the demo's servers are not all meshed,
# answering and reached over mTLS only in plexusctl stat's output STAT.
all_meshed() {
	local d line
	for d in web books votes; do
		line=$(echo "$1" | awk -v d="$d" '$1 == d')
		[ -n "$line" ] || { echo "plexusctl stat shows no row for $d"; return 1; }
		echo "$line" | grep -q '1/1' || { echo "$d is not meshed: $line"; return 1; }
		echo "$line" | awk '{print $NF}' | grep -q '^100' || { echo "$d is not reached over mTLS only: $line"; return 1; }
	done
}
step "letting the load generator run until plexusctl stat shows every edge (5s window)"
deadline=$((SECONDS + 60))
until why=""; stat=$($PLEXUSCTL stat deploy -n plexus-demo --window 5s 2>&1) && why=$(all_meshed "$stat"); do
	[ $SECONDS -lt $deadline ] || { echo "$stat" >&2; die "${why:-plexusctl stat failed}"; }
	sleep 2
done
echo
echo "$stat" | sed 's/^/    /'
echo
step "the data plane: plexusctl check --proxy -n plexus-demo, and plexusctl version"
$PLEXUSCTL check --proxy -n plexus-demo | grep 'data plane' | sed 's/^/    /' ||
	die "plexusctl check --proxy failed for plexus-demo"
$PLEXUSCTL version | sed 's/^/    /'
step "traffic management: a 90/10 canary of books behind an HTTPRoute with retries and a timeout"
kubectl apply -f "$HERE/demo/routes.yaml" >/dev/null
kubectl -n plexus-demo rollout status deployment/books-v2 --timeout 180s >/dev/null ||
	{ kubectl -n plexus-demo describe pods >&2; die "deployment books-v2 did not become ready"; }
deadline=$((SECONDS + 60))
until kubectl -n plexus-demo get httproute books-canary -o jsonpath='{.status.parents[0].conditions[?(@.type=="Accepted")].status}' 2>/dev/null | grep -q True; do
	[ $SECONDS -lt $deadline ] || { kubectl -n plexus-demo get httproute books-canary -o yaml >&2; die "the books-canary HTTPRoute was not accepted"; }
	sleep 1
done
sleep 15
routes=$($PLEXUSCTL routes deploy/web -n plexus-demo --window 10s -o wide)
echo
echo "$routes" | sed 's/^/    /'
echo
echo "$routes" | grep -q 'books-canary' || die "plexusctl routes shows no books-canary route for web"
step "authorization: books answers web alone (Server + AuthorizationPolicy + MeshTLSAuthentication)"
kubectl apply -f "$HERE/demo/policy.yaml" >/dev/null
policy_at=$SECONDS
sleep 3 # policies reach the proxies in well under a second
kubectl -n plexus-demo delete pod intruder --ignore-not-found --wait=true >/dev/null
kubectl -n plexus-demo run intruder --image=plexus.dev/testapp:dev --image-pull-policy=IfNotPresent --restart=Never \
	--overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"intruder","image":"plexus.dev/testapp:dev","args":["get","http://books.plexus-demo.svc.cluster.local:8080/"],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}' >/dev/null
# Its first answer is what is shown: testapp get retries for a minute
# when refused, so the pod is not waited for once a 403 is in its log.
deadline=$((SECONDS + 120))
until intruder=$(kubectl -n plexus-demo logs intruder -c intruder 2>&1) && echo "$intruder" | grep -q '403' ||
	{ phase=$(kubectl -n plexus-demo get pod intruder -o jsonpath='{.status.phase}' 2>/dev/null) && [ "$phase" = Succeeded -o "$phase" = Failed ]; }; do
	[ $SECONDS -lt $deadline ] || { kubectl -n plexus-demo describe pod intruder >&2; die "the intruder pod did not finish"; }
	sleep 1
done
intruder=$(kubectl -n plexus-demo logs intruder -c intruder 2>&1 || true)
echo "    a meshed pod with another identity asks books: $(echo "$intruder" | grep -m1 '403' || echo "$intruder" | tail -1)"
echo "$intruder" | grep -q '403' || die "books answered a client other than web: $intruder"
# Its refused retries would count in books' window below.
kubectl -n plexus-demo delete pod intruder --wait=true >/dev/null
gone_at=$SECONDS
# The 10 s window below must begin after the policy reached the proxies
# and the intruder was gone.
wait_until=$((policy_at + 13 > gone_at + 11 ? policy_at + 13 : gone_at + 11))
[ $((wait_until - SECONDS)) -le 0 ] || sleep $((wait_until - SECONDS))
stat=$($PLEXUSCTL stat deploy -n plexus-demo --window 10s)
line=$(echo "$stat" | awk '$1 == "books"')
echo "    $line"
echo "$line" | awk '{print $3}' | grep -q '^100' || die "web's requests to books fail under the policy: $line"
authz=$($PLEXUSCTL authz deploy/books -n plexus-demo --port 8080 --from sa/web)
echo
echo "$authz" | sed 's/^/    /'
echo
echo "$authz" | grep -q 'books-from-web' || die "plexusctl authz does not show the books-from-web policy"
# With nodes in two zones (make demo NODES=3): votes gets a replica in
# each zone and asks for zone-aware balancing; web's requests then stay
# in web's zone (its proxy counts them by zone locality).
zones=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.labels.topology\.kubernetes\.io/zone}{"\n"}{end}' | sort -u | grep -c . || true)
if [ "$zones" -ge 2 ]; then
	step "zone-aware balancing: votes in every zone, web's requests stay in web's zone"
	kubectl -n plexus-demo patch deployment votes --type merge -p \
		'{"spec":{"replicas":'"$zones"',"template":{"spec":{"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"app":"votes"}},"matchLabelKeys":["pod-template-hash"]}]}}}}' >/dev/null
	kubectl -n plexus-demo rollout status deployment/votes --timeout 180s >/dev/null ||
		{ kubectl -n plexus-demo describe pods -l app=votes >&2; die "votes did not spread over the zones"; }
	kubectl -n plexus-demo annotate service votes balancer.plexus.dev/zone-aware=true --overwrite >/dev/null
	web=$(kubectl -n plexus-demo get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
	zone_of() { kubectl get node "$(kubectl -n plexus-demo get pod "$1" -o jsonpath='{.spec.nodeName}')" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}'; }
	web_zone=$(zone_of "$web")
	votes_pods=$(kubectl -n plexus-demo get pods -l app=votes -o go-template='{{range .items}}{{if not .metadata.deletionTimestamp}}{{.metadata.name}} {{end}}{{end}}')
	spread=$(for p in $votes_pods; do zone_of "$p"; echo; done | sort -u | grep -c .)
	[ "$spread" -ge "$zones" ] || { kubectl -n plexus-demo get pods -l app=votes -o wide >&2; die "votes' replicas are in $spread zone(s), want $zones"; }
	zone_requests() {
		kubectl get --raw "/api/v1/namespaces/plexus-demo/pods/$web:4191/proxy/metrics" |
			awk -v l="zone_locality=\"$1\"" '/^outbound_http_balancer_zone_requests_total/ && /backend_name="votes"/ && index($0, l) { s += $NF } END { print s + 0 }'
	}
	# Let web's proxy see the new policy and its zone, then count 15s.
	sleep 10
	l0=$(zone_requests local) r0=$(zone_requests remote)
	sleep 15
	l=$(($(zone_requests local) - l0)) r=$(($(zone_requests remote) - r0))
	echo "    web (in $web_zone) -> votes in the last 15s: $l requests in its zone, $r in another"
	for p in $votes_pods; do
		echo "      votes replica $p in $(zone_of "$p")"
	done
	[ $((l + r)) -gt 0 ] || die "web's proxy counted no zone-aware request to votes"
	[ $((l * 100)) -ge $(((l + r) * 95)) ] || die "only $l of $((l + r)) of web's requests to votes stayed in its zone (want 95 %)"
fi

step "observability: the viz extension (tap, Prometheus, dashboard)"
for d in plexus-tap plexus-prometheus plexus-web; do
	kubectl -n plexus-viz rollout status "deployment/$d" --timeout 180s >/dev/null ||
		{ kubectl -n plexus-viz describe pods >&2; die "deployment $d of plexus-viz did not become ready"; }
done
deadline=$((SECONDS + 60))
until [ "$(kubectl get apiservice v1alpha1.tap.plexus.dev -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]; do
	[ $SECONDS -lt $deadline ] || { kubectl get apiservice v1alpha1.tap.plexus.dev -o yaml >&2; die "the tap API did not become available"; }
	sleep 1
done
tap=$($PLEXUSCTL viz tap deploy/web -n plexus-demo --path /books --limit 2)
echo
echo "$tap" | sed 's/^/    /'
echo
echo "$tap" | grep -q ':status=' || die "plexusctl viz tap shows no response"
deadline=$((SECONDS + 90))
until edges=$($PLEXUSCTL viz edges deploy -n plexus-demo 2>/dev/null) && [ "$(echo "$edges" | grep -c '√')" -ge 3 ]; do
	[ $SECONDS -lt $deadline ] || { echo "$edges" >&2; die "plexusctl viz edges does not show the demo's three secured edges"; }
	sleep 5
done
echo "$edges" | sed 's/^/    /'
echo
log "demo finished in $((SECONDS - start))s"
cat <<MSG

Every edge (load -> web -> books over HTTP/1.1, web -> votes over gRPC) is
meshed and carried over mTLS. web's requests to books follow the
books-canary HTTPRoute: 10 % go to books-v2, whose failures are retried.
books answers web alone: a Server with an AuthorizationPolicy for web's
mesh identity; any other caller gets 403. The viz extension (namespace
plexus-viz) taps live requests, keeps 6 h of metrics in Prometheus and
serves a dashboard.

Explore:
    $(print_env | head -1)
    $(print_env | tail -1)
    bin/plexusctl stat deploy -n plexus-demo
    bin/plexusctl stat pod -n plexus-demo -o wide
    bin/plexusctl routes deploy/web -n plexus-demo -o wide
    kubectl -n plexus-demo get httproute books-canary -o yaml
    kubectl -n plexus-demo get server,authorizationpolicy,meshtlsauthentication
    bin/plexusctl authz deploy/books -n plexus-demo --from sa/load
    bin/plexusctl check --proxy -n plexus-demo
    bin/plexusctl upgrade                # a running mesh to this build (or: helm, deploy/charts/README.md)
    bin/plexusctl viz dashboard          # the dashboard, port-forwarded to localhost
    bin/plexusctl viz top deploy/web -n plexus-demo
    bin/plexusctl viz tap deploy/web -n plexus-demo --to deploy/books
    bin/plexusctl viz stat deploy -n plexus-demo
    kubectl -n plexus-demo get pods -o wide
Tear down:
    make cluster-down
MSG
