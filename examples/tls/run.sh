#!/usr/bin/env bash
# `make run-tls`: TLS termination with a Secret and spec.tls, with no cluster. Generates a root
# and a certificate for secure.example.com signed by it (examples/tls/certificate.py: a fresh key
# each run, in a temporary directory removed at exit), writes them as the kubernetes.io/tls Secret
# that ingress.yaml's spec.tls names, starts the echo backend of services.yaml on loopback and
# twingress in front of it: HTTPS on 127.0.0.1:8443, HTTP on 127.0.0.1:8080 (a 308 to HTTPS for
# the TLS host), admin on 127.0.0.1:10254, or where HTTP, HTTPS and ADMIN say (examples/lib.sh).
# Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=tls
source examples/lib.sh

if [[ -z $https ]]; then
    echo "$example: HTTPS is off: this example serves TLS" >&2
    exit 1
fi
manifests=$work/tls
mkdir "$manifests"
ln -s "$PWD"/examples/tls/{ingress,services}.yaml "$manifests"/
"$py" examples/tls/certificate.py secure.example.com demo/secure-example-tls "$manifests"

backend web-pod tcp:8301:interface=127.0.0.1
backends_ready

serving
secure=$(address "$https")
cat <<HINTS
  the Secret demo/secure-example-tls  $manifests/secret.yaml   (signed by $manifests/root.pem)
try:
  curl --cacert $manifests/root.pem --resolve secure.example.com:${secure##*:}:${secure%:*} https://secure.example.com:${secure##*:}/   # web-pod, verified
  openssl s_client -connect $secure -servername secure.example.com -CAfile $manifests/root.pem </dev/null 2>/dev/null | openssl x509 -noout -subject -issuer
HINTS
[[ -z $http ]] || echo "  curl -i -H 'Host: secure.example.com' http://$(address "$http")/   # 308 to https://"
twingress --manifests "$manifests" "$@"
