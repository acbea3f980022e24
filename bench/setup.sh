#!/bin/sh
# Install what the benchmarks in bench/ need: nginx (backend and reference proxy),
# wrk (load generator) and taskset (util-linux, CPU pinning).  Idempotent: does
# nothing when all three are already on PATH (or nginx in /usr/sbin).
set -eu

have() { command -v "$1" >/dev/null 2>&1; }
have_nginx() { have nginx || [ -x /usr/sbin/nginx ]; }

if have_nginx && have wrk && have taskset; then
    echo "bench/setup.sh: nginx, wrk and taskset already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    have sudo || { echo "bench/setup.sh: need root or sudo to apt-get install" >&2; exit 1; }
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y nginx wrk util-linux

# The nginx package may start a system nginx on :80; the benchmark does not use it
# (it runs its own nginx instances on free 127.0.0.1 ports).
have_nginx && have wrk && have taskset
echo "bench/setup.sh: done"
