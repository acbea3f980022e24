#!/usr/bin/env bash
# Build what the test node needs beside the kubernetes binaries of build.sh (see testenv/README.md,
# "The node"), into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/node-<containerd version>/
#     bin/containerd bin/containerd-shim-runc-v2 bin/ctr   containerd 2.x, from testenv/node/go.mod
#     images/pause.tar images/echo.tar                      our pause and echo images (docker-archive)
#     containers.conf                                        podman's configuration for this machine
#
# The images are built FROM scratch by podman (no registry is reachable) from our own static Go
# programs (testenv/node/pause, testenv/node/echo), as localhost/twingress-pause:test and
# localhost/twingress-echo:test. Idempotent: a no-op when everything was built from the current
# sources. The last line of output is always the directory.
#
#   testenv/node.sh              build if needed, print the directory
#   testenv/node.sh --print-dir  print the directory, build nothing
#
# Environment: GO (the go command), TWINGRESS_CACHE (cache root). Needs the Debian packages of
# testenv/system-packages.sh (podman, runc, iptables, containernetworking-plugins).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "testenv/node.sh: error: $*" >&2; exit 1; }

containerd=$(awk '$1 == "github.com/containerd/containerd/v2" { print $2; exit }' "$here/node/go.mod")
[ -n "$containerd" ] || die "no github.com/containerd/containerd/v2 requirement in testenv/node/go.mod"
dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/node-$containerd

case "${1:-}" in
    --print-dir) echo "$dir"; exit 0 ;;
    "") ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (try --help)" ;;
esac

binaries=(containerd containerd-shim-runc-v2 ctr pause echo)
images=(pause echo)
build_flags=(-trimpath "-ldflags=-s -w")

# podman as this machine allows it: runc (crun refuses cgroup v1 hierarchies in hybrid mode), no
# default ulimits (raising RLIMIT_NOFILE/NPROC needs CAP_SYS_RESOURCE, which the sandbox lacks).
containers_conf() {
    cat <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
}

stamp_value() {
    {
        printf '%s\n' "${build_flags[@]}"
        containers_conf
        cat "$here/node/go.mod" "$here/node/go.sum" "$here"/node/pause/*.go "$here"/node/echo/*.go \
            "$here/node/pause/Containerfile" "$here/node/echo/Containerfile"
    } | sha256sum | cut -d' ' -f1
}
up_to_date() {
    local b
    for b in "${binaries[@]}"; do [ -x "$dir/bin/$b" ] || return 1; done
    for b in "${images[@]}"; do [ -s "$dir/images/$b.tar" ] || return 1; done
    [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$(stamp_value)" ]
}

if up_to_date; then
    echo "testenv: node (containerd $containerd, images) is up to date" >&2
    echo "$dir"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go); the node's containerd is built from Go modules"
command -v podman >/dev/null || die "podman not found: run testenv/system-packages.sh (make system-packages)"

mkdir -p "$dir"
exec 9>"$dir/.lock"
if ! flock -n 9; then
    echo "testenv: another build holds $dir/.lock, waiting ..." >&2
    flock 9
fi
if up_to_date; then
    echo "$dir"
    exit 0
fi

work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GO111MODULE=on
start=$(date +%s)
echo "testenv: building containerd $containerd (containerd, shim, ctr) and the pause and echo programs ..." >&2
(cd "$here/node" && nice -n 15 "$GO" build "${build_flags[@]}" -o "$work/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr \
    ./pause ./echo) || die "building containerd or the image programs failed (see the go output above)"

containers_conf >"$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"
mkdir -p "$work/images"
for image in "${images[@]}"; do
    context="$work/context-$image"
    mkdir -p "$context"
    cp "$work/$image" "$context/$image"
    cp "$here/node/$image/Containerfile" "$context/Containerfile"
    podman build --quiet --network=none --pull=never -t "localhost/twingress-$image:test" "$context" >/dev/null \
        || die "podman build of the $image image failed"
    rm -f "$work/images/$image.tar"
    podman save --quiet --format docker-archive -o "$work/images/$image.tar" "localhost/twingress-$image:test" \
        || die "podman save of the $image image failed"
done

mkdir -p "$dir/bin" "$dir/images"
for b in "${binaries[@]}"; do mv -f "$work/$b" "$dir/bin/$b"; done
for image in "${images[@]}"; do mv -f "$work/images/$image.tar" "$dir/images/$image.tar"; done
mv -f "$work/containers.conf" "$dir/containers.conf"
stamp_value >"$dir/stamp"
echo "testenv: node built in $(( $(date +%s) - start ))s into $dir" >&2
echo "$dir"
