#!/usr/bin/env bash
# testenv/image.sh [--archive | --print]
#
# Builds the twingress image from the Dockerfile with podman (a real builder; no Docker engine runs
# here) as a user's `podman build` would, with two differences the test machine forces:
#   - the base images are the local bookworm ones of testenv/base-images.sh (build arguments
#     BUILD_IMAGE and RUNTIME_IMAGE; no registry is reachable for python:3.11);
#   - the machine's CA bundle (TWINGRESS_BUILD_CA, default /etc/ssl/certs/ca-certificates.crt) is
#     mounted over the base's bundle during the RUN steps, for pip to reach PyPI through this
#     machine's TLS proxy. A build-time volume: nothing of it stays in a layer (tests/deploy checks).
# The context is a clean export of the tracked files as they are in the work tree (`git stash
# create`, then `git archive`), so an untracked file can never make the build pass, and the
# .dockerignore is the one users get. Tags: localhost/twingress:<version of setup.cfg> and
# ...:<version>-rollout (the same image under a second tag, for the DaemonSet rollout test).
# A stamp keyed on the tracked tree and the base images makes a current build a no-op.
#
# --archive: also writes both tags into one docker-archive (podman save -m), for a node's runtime
#            to import (ctr images import); prints its path last.
# --print:   prints IMAGE=, ROLLOUT_IMAGE=, ARCHIVE=, TREE= (the tree a current image is labelled
#            with, io.twingress.test.tree) and builds nothing.
# Needs the network (Debian mirror, PyPI): run it outside testenv/netns-run (`make image` does).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
podman=("$here/podman")
version=$(sed -n 's/^version *= *//p' "$root/setup.cfg")
image=${TWINGRESS_IMAGE_NAME:-localhost/twingress}:$version
rollout_image=$image-rollout
cache=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/image
archive=$cache/twingress-$version.tar
ca=${TWINGRESS_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}

# The tracked files as they are in the work tree (staged or not), as one git tree.
tree=$(cd "$root" && { stash=$(git stash create); git rev-parse "${stash:-HEAD}^{tree}"; })
if [ "${1:-}" = --print ]; then
    printf 'IMAGE=%s\nROLLOUT_IMAGE=%s\nARCHIVE=%s\nTREE=%s\n' "$image" "$rollout_image" "$archive" "$tree"
    exit 0
fi
die() { echo "testenv/image.sh: error: $*" >&2; exit 1; }

bases=$("$here/base-images.sh" | tail -2)
eval "$bases"  # BUILD_IMAGE=..., RUNTIME_IMAGE=...
mkdir -p "$cache"
exec 9>"$cache/.image.lock"
flock 9

key=$(printf '%s\n' "$tree" "$BUILD_IMAGE" "$RUNTIME_IMAGE" "$image" | sha256sum | cut -c1-16)
stamp=$cache/image.stamp

report_size() {
    local bytes
    bytes=$("${podman[@]}" image inspect --format '{{.Size}}' "$image")
    echo "image: $image (and $rollout_image), $((bytes / 1000000)) MB ($bytes bytes)"
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && "${podman[@]}" image exists "$image" && "${podman[@]}" image exists "$rollout_image"; then
    echo "image: current (tree $tree)" >&2
else
    context=$(mktemp -d "${TMPDIR:-/tmp}/twingress-image.XXXXXX")
    trap 'rm -rf "$context"' EXIT
    (cd "$root" && git archive "$tree") | tar -x -C "$context"
    volume=()
    [ -f "$ca" ] && volume=(--volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
    echo "image: building $image from tree $tree on $BUILD_IMAGE / $RUNTIME_IMAGE" >&2
    started=$SECONDS
    # --network=host: the RUN steps reach the mirror and PyPI as this shell does (no CNI needed);
    # --layers: unchanged steps are reused from the previous build.
    nice "${podman[@]}" build --layers --network=host "${volume[@]}" \
        --build-arg "BUILD_IMAGE=$BUILD_IMAGE" --build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE" \
        --label "io.twingress.test.tree=$tree" --tag "$image" --tag "$rollout_image" "$context" >"$cache/build.log" 2>&1 \
        || { tail -30 "$cache/build.log" >&2; die "podman build failed (log: $cache/build.log)"; }
    echo "image: built in $((SECONDS - started)) s (log: $cache/build.log)" >&2
    echo "$key" >"$stamp"
    rm -f "$archive.stamp"
fi
report_size

if [ "${1:-}" = --archive ]; then
    if [ "$(cat "$archive.stamp" 2>/dev/null)" != "$key" ] || [ ! -f "$archive" ]; then
        rm -f "$archive"
        "${podman[@]}" save --quiet --format docker-archive --multi-image-archive -o "$archive.tmp" "$image" "$rollout_image"
        mv "$archive.tmp" "$archive"
        echo "$key" >"$archive.stamp"
    fi
    echo "$archive"
fi
