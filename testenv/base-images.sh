#!/usr/bin/env bash
# testenv/base-images.sh [--print]
#
# The Dockerfile's two base images, made here: no image registry is reachable from the test
# machine, so python:3.11 / python:3.11-slim cannot be pulled. Debian bookworm (its python3 is
# 3.11) is debootstrapped from the Debian mirror and imported into podman as
#   localhost/twingress-base/bookworm-runtime:<key>  python3, python3-venv, ca-certificates
# and the build base is that image plus the compiler packages (apt-get in a podman build: a
# second debootstrap took 338 s, this takes about a minute):
#   localhost/twingress-base/bookworm-build:<key>    ... and python3-dev, gcc, libc6-dev
# <key> is a hash of the recipe below (suite, packages, recipe version), so a changed recipe makes
# new images and a current one is a no-op (well under a second). The debootstrapped root is kept
# as a tarball in ${TWINGRESS_CACHE:-~/.cache/twingress}/image/bases/<key>/, the .debs in
# .../image/debs, so that a lost runtime image is re-imported without the mirror.
#
# Last two output lines: BUILD_IMAGE=<name> and RUNTIME_IMAGE=<name> (`--print` prints only them,
# without building). Env: TWINGRESS_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs root (debootstrap, podman's storage) and the Debian packages debootstrap and podman
# (testenv/system-packages.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm
mirror=${TWINGRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
runtime_packages=python3,python3-venv,ca-certificates
build_packages="python3-dev gcc libc6-dev"
recipe_version=2  # bump when the way the images are made changes
key=$(printf '%s\n' "$suite" "$runtime_packages" "$build_packages" "$recipe_version" | sha256sum | cut -c1-12)
build_image=localhost/twingress-base/$suite-build:$key
runtime_image=localhost/twingress-base/$suite-runtime:$key

print_names() { echo "BUILD_IMAGE=$build_image"; echo "RUNTIME_IMAGE=$runtime_image"; }
[ "${1:-}" = --print ] && { print_names; exit 0; }

die() { echo "testenv/base-images.sh: error: $*" >&2; exit 1; }
podman=("$here/podman")
cache=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/image
dir=$cache/bases/$key
mkdir -p "$dir" "$cache/debs"
exec 9>"$cache/.bases.lock"
flock 9  # another worktree may be making the same images

# make_root: $dir/runtime.tar, a minimal bookworm root with the runtime packages.
make_root() {
    local flavour=runtime packages=$runtime_packages root=$dir/runtime.root
    [ -f "$dir/$flavour.tar" ] && return 0
    [ "$(id -u)" = 0 ] || die "debootstrap needs root"
    command -v debootstrap >/dev/null || die "debootstrap not found (testenv/system-packages.sh installs it)"
    rm -rf "$root"
    echo "base-images: debootstrap $suite ($flavour: $packages) from $mirror" >&2
    local started=$SECONDS
    debootstrap --variant=minbase --include="$packages" --cache-dir="$cache/debs" "$suite" "$root" "$mirror" >"$dir/$flavour.debootstrap.log" 2>&1 \
        || { tail -20 "$dir/$flavour.debootstrap.log" >&2; die "debootstrap failed (log: $dir/$flavour.debootstrap.log)"; }
    # What a Debian container image has: the full bookworm sources (the Dockerfile's runtime stage
    # installs libcap2-bin with apt), no services started by package scripts, no host files, no
    # package lists, caches or docs.
    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
SOURCES
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
    rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
    : >"$root/etc/resolv.conf"
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
        "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
        "$root"/tmp/* "$root"/var/tmp/*
    tar --numeric-owner --xattrs --xattrs-include='*' -C "$root" -cf "$dir/$flavour.tar.tmp" .
    mv "$dir/$flavour.tar.tmp" "$dir/$flavour.tar"
    rm -rf "$root"
    echo "base-images: $flavour root made in $((SECONDS - started)) s ($(du -h "$dir/$flavour.tar" | cut -f1))" >&2
}

# import_runtime: the runtime image in podman's storage, from $dir/runtime.tar.
import_runtime() {
    "${podman[@]}" image exists "$runtime_image" && return 0
    make_root
    "${podman[@]}" import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --message "twingress test base: debootstrap --variant=minbase $suite (runtime), recipe $key" \
        "$dir/runtime.tar" "$runtime_image" >/dev/null
    echo "base-images: imported $runtime_image" >&2
}

# build_build: the build image, the runtime image plus the compiler packages.
build_build() {
    "${podman[@]}" image exists "$build_image" && return 0
    local started=$SECONDS
    printf '%s\n' "FROM $runtime_image" \
        "RUN apt-get update && apt-get install -y --no-install-recommends $build_packages && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/*.log /usr/share/doc/* /usr/share/man/*" \
        | "${podman[@]}" build --quiet --network=host --tag "$build_image" --file - "$dir" >"$dir/build.log" 2>&1 \
        || { tail -20 "$dir/build.log" >&2; die "building $build_image failed (log: $dir/build.log)"; }
    echo "base-images: built $build_image in $((SECONDS - started)) s" >&2
}

import_runtime
build_build
print_names
