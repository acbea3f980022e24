#!/usr/bin/env bash
# `make run-streams`: TCP and UDP streams with no cluster. Starts stream echo backends on
# loopback (the "pods" of services.yaml) and twingress in front of them: the StreamIngresses of
# streams.yaml on TCP port 9700 and UDP port 9753 of 127.0.0.1 (or of STREAM_INTERFACE:
# --stream-interface), HTTP on 127.0.0.1:8080, HTTPS on 127.0.0.1:8443, admin on 127.0.0.1:10254,
# or where HTTP, HTTPS and ADMIN say (examples/lib.sh). The hints send with examples/nc.py (any
# Python 3; `nc` or `socat` do the same). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=streams
source examples/lib.sh

backend tcp-pod-a tcp:8201:interface=127.0.0.1 tcp
backend tcp-pod-b tcp:8201:interface=127.0.0.2 tcp
backend udp-pod udp:8202:interface=127.0.0.1 udp
backends_ready

serving
streams=$(reach "$stream_interface")
cat <<HINTS
  TCP    $streams:9700   (StreamIngress demo/tcp-echo, on $(bound "$stream_interface"))
  UDP    $streams:9753   (StreamIngress demo/udp-echo, on $(bound "$stream_interface"))
try:
  echo hello | python3 examples/nc.py $streams 9700      # tcp-pod-a: hello (or tcp-pod-b)
  echo hello | python3 examples/nc.py -u $streams 9753   # udp-pod: hello
  curl -s $admin_url/debug/routes           # "streams": TCP/9700, UDP/9753
HINTS
twingress --manifests examples/streams "$@"
