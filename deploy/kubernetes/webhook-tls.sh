#!/usr/bin/env bash
# The TLS material of gpuslice's admission webhook (gpuslice-scheduler.yaml):
# a CA of its own and a certificate for the gpuslice-webhook Service, the
# key and certificate as the Secret gpuslice-webhook-tls, and the CA as the
# webhook configuration's caBundle (the API server trusts only it for the
# webhook). Run once after `kubectl apply -k deploy/kubernetes`, and again to
# renew (the extender reads a renewed certificate without a restart).
#
#   deploy/kubernetes/webhook-tls.sh [KUBECTL ARGS...]    e.g. --kubeconfig FILE
#
# Needs openssl and kubectl. DAYS (default 825) sets the validity.
set -euo pipefail

namespace=gpuslice-system
service=gpuslice-webhook
secret=gpuslice-webhook-tls
webhook=gpuslice-scheduler-name
days=${DAYS:-825}
kubectl=(kubectl "$@")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -subj "/CN=gpuslice-webhook-ca" -days "$days" -sha256 \
  -out ca.crt 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out tls.key
openssl req -new -key tls.key -subj "/CN=$service.$namespace.svc" -out tls.csr 2>/dev/null
cat >tls.ext <<EXT
subjectAltName=DNS:$service.$namespace.svc,DNS:$service.$namespace.svc.cluster.local,DNS:$service.$namespace,DNS:$service
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature,keyEncipherment
EXT
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -sha256 \
  -extfile tls.ext -out tls.crt 2>/dev/null

"${kubectl[@]}" -n "$namespace" create secret tls "$secret" --cert=tls.crt --key=tls.key \
  --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
ca=$(base64 -w0 ca.crt)
"${kubectl[@]}" patch mutatingwebhookconfiguration "$webhook" --type=json \
  -p "[{\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/caBundle\", \"value\": \"$ca\"}]" >/dev/null
echo "webhook-tls: Secret $namespace/$secret and the caBundle of $webhook written (valid $days days)"
