#!/usr/bin/env bash
# testenv/base-images.sh [--print]
#
# The Dockerfile's two base images, made here: no image registry is reachable from the test
# machine, so python:3.11 / python:3.11-slim cannot be pulled. Debian bookworm (its python3 is
# 3.11) is debootstrapped from the Debian mirror and imported into podman as
#   localhost/twingress-base/bookworm-build:<key>    python3, python3-venv, python3-dev, gcc, libc6-dev, ca-certificates
#   localhost/twingress-base/bookworm-runtime:<key>  python3, python3-venv, ca-certificates
# <key> is a hash of the recipe below (suite, packages, recipe version), so a changed recipe makes
# new images and a current one is a no-op (well under a second). The debootstrapped roots are kept
# as tarballs in ${TWINGRESS_CACHE:-~/.cache/twingress}/image/bases/<key>/, the .debs in
# .../image/debs, so that a lost image is re-imported without the mirror.
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
build_packages=$runtime_packages,python3-dev,gcc,libc6-dev
recipe_version=1  # bump when the way the roots are made changes
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

# make_root FLAVOUR PACKAGES: $dir/FLAVOUR.tar, a minimal bookworm root with PACKAGES.
make_root() {
    local flavour=$1 packages=$2 root=$dir/$1.root
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

# import_root FLAVOUR IMAGE: IMAGE in podman's storage, from $dir/FLAVOUR.tar.
import_root() {
    local flavour=$1 image=$2
    "${podman[@]}" image exists "$image" && return 0
    make_root "$flavour" "$([ "$flavour" = build ] && echo "$build_packages" || echo "$runtime_packages")"
    "${podman[@]}" import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --message "twingress test base: debootstrap --variant=minbase $suite ($flavour), recipe $key" \
        "$dir/$flavour.tar" "$image" >/dev/null
    echo "base-images: imported $image" >&2
}

import_root runtime "$runtime_image"
import_root build "$build_image"
print_names
