#!/usr/bin/env bash
# Install the Debian packages the tests and benchmarks use, when any is missing:
# curl and openssl (real clients), iproute2 + util-linux (the tests' network namespace),
# nginx and wrk (benchmarks' reference), socat (stream tests), h2load (nghttp2-client: HTTP/2 tests and benchmarks),
# haproxy and iperf3 (the streams scenario), valgrind and perf (the instructions and workers-cost scenarios:
# tests/bench runs every scenario of python -m bench once),
# and for the test node (tests/kube/node.py): runc (containerd's runtime; crun refuses this machine's
# cgroup v1 hierarchies), podman (builds the images), iptables and conntrack (kube-proxy), and the
# reference CNI plugins (containernetworking-plugins: bridge, host-local, loopback, portmap).
# podman + runc are also the image's builder and runtime (testenv/image.sh, tests/deploy),
# and debootstrap (the image's local base images, testenv/base-images.sh).
# Idempotent and quick when everything is present; needs root (or sudo) only to install.
set -euo pipefail

need=()
for pair in curl:curl h2load:nghttp2-client openssl:openssl ip:iproute2 unshare:util-linux nsenter:util-linux nginx:nginx wrk:wrk socat:socat taskset:util-linux \
            haproxy:haproxy iperf3:iperf3 valgrind:valgrind callgrind_control:valgrind perf:linux-perf \
            runc:runc podman:podman iptables:iptables conntrack:conntrack /usr/lib/cni/bridge:containernetworking-plugins debootstrap:debootstrap; do
    cmd=${pair%%:*}; pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "system-packages: need root to install: ${need[*]}" >&2; exit 1; }
    sudo=sudo
fi
echo "system-packages: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
