#!/usr/bin/env bash
# Writes the local cluster's PKI into $PKI_DIR: one CA, serving and client
# certificates for every component, and the service-account signing key.
# Kept when it exists and is still valid for this node.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/lib.sh"

mkdir -p "$PKI_DIR"
cd "$PKI_DIR"
umask 077

if [ -f ca.crt ] && [ -f front-proxy-client.crt ] && [ -f .complete ] && grep -qx "$APISERVER_ADDR" .complete; then
	exit 0
fi
rm -f ./*.crt ./*.key ./*.csr ./*.pub ./*.ext ./*.srl .complete


openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
	-subj "/CN=$CLUSTER_ID-cluster-ca" -keyout ca.key -out ca.crt \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

cert apiserver "/CN=kube-apiserver" serverAuth \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN,DNS:localhost,IP:127.0.0.1,IP:$APISERVER_ADDR,IP:$KUBERNETES_SERVICE_IP"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
if $HOST_NODE; then # node.sh makes its nodes' (kubelet-N)
	cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
	cert kubelet "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,IP:$NODE_IP"
fi

# The aggregation layer (kubeadm's layout): a CA of its own, whose client
# certificate the API server presents to extension API servers (the tap
# service) with the caller's identity in X-Remote-* headers.
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
	-subj "/CN=$CLUSTER_ID-front-proxy-ca" -keyout front-proxy-ca.key -out front-proxy-ca.crt \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=front-proxy-client" -keyout front-proxy-client.key -out front-proxy-client.csr
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >front-proxy-client.ext
openssl_quiet x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
	-days 365 -extfile front-proxy-client.ext -out front-proxy-client.crt
rm -f front-proxy-client.csr front-proxy-client.ext

openssl_quiet ecparam -name prime256v1 -genkey -noout -out sa.key.ec
openssl_quiet pkcs8 -topk8 -nocrypt -in sa.key.ec -out sa.key
rm -f sa.key.ec
openssl_quiet pkey -in sa.key -pubout -out sa.pub
echo "$APISERVER_ADDR" >.complete
