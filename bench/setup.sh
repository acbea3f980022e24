#!/bin/sh
# Install what the benchmarks in bench/ need: nginx (backend and reference proxy),
# wrk (load generator), taskset (util-linux, CPU pinning), and for stream_bench.py
# haproxy and socat (reference proxies), iperf3 (TCP load) and a C compiler (its UDP
# load tool).  Idempotent: does nothing when all are already on PATH (or in /usr/sbin).
set -eu

have() { command -v "$1" >/dev/null 2>&1; }
have_nginx() { have nginx || [ -x /usr/sbin/nginx ]; }

have_streams() { (have haproxy || [ -x /usr/sbin/haproxy ]) && have socat && have iperf3 && have cc; }

if have_nginx && have wrk && have taskset && have_streams; then
    echo "bench/setup.sh: nginx, wrk, taskset, haproxy, socat, iperf3 and cc already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    have sudo || { echo "bench/setup.sh: need root or sudo to apt-get install" >&2; exit 1; }
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y nginx wrk util-linux haproxy socat iperf3 gcc libc6-dev

# The nginx package may start a system nginx on :80; the benchmark does not use it
# (it runs its own nginx instances on free 127.0.0.1 ports).
have_nginx && have wrk && have taskset && have_streams
echo "bench/setup.sh: done"
