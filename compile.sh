#!/usr/bin/env bash
# The compiled build, the one the image ships: the request path compiled by mypyc (setup.py,
# TWINGRESS_COMPILE=1) and the HTTP/2 stack by Cython (h2stack.py), made away from the tree and
# the venv's installed files: mypyc's modules go to STAGED/lib, the HTTP/2 stack to h2stack.py's
# cache, and STAGED/.complete is written last, so only a whole build is ever put in place (the
# Makefile's INSTALL_STAGED: seconds). `make compiled` runs it and puts the build in place at once;
# an example's start (`make run`) runs it niced in the background while the example serves on the
# pure build, which has imported the tree's and the venv's modules, and the next start puts it in
# place. Each step says what it does and how long it usually takes.
# Usage: ./compile.sh PYTHON STAGED
set -euo pipefail
cd "$(dirname "$0")"
py=$1 staged=$2
started=$SECONDS
step() { echo "compile: $1 ($((SECONDS - started)) s so far)"; }
trap 'echo "compile: failed (above); nothing was put in place"' ERR

rm -rf "$staged"
step "the request path with mypyc (1 to 3 minutes on 2 cores, by load)"
TWINGRESS_COMPILE=1 "$py" setup.py -q build_ext --build-lib "$staged/lib" --build-temp "$staged/temp"
step "the HTTP/2 stack (h2, hpack, hyperframe) with Cython (3 to 10 minutes on 2 cores, by load; seconds when h2stack.py's cache has it)"
"$py" h2stack.py build
rm -rf "$staged/temp"
touch "$staged/.complete"
step "done"
