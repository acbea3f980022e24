# syntax=docker/dockerfile:1
# twingress: `docker build -t twingress .` (or `podman build`), then see k8s/ (README "Install on a cluster").
#
# Stage 1 builds wheels of twingress and of every dependency (the full python image has the
# compilers a dependency without a binary wheel would need, and that mypyc needs); stage 2 installs
# them into the slim image without an index and without compilers, and runs as an unprivileged user.
#
# The base images are build arguments, the official Python images by default. Any Debian-like image
# with python3 (3.11+), its venv module and ca-certificates will do (the build stage also needs the
# Python headers and a C compiler): the tests build this same file on Debian bookworm bases made
# locally (testenv/base-images.sh, `make image`), as no registry is reachable there. Both stages
# install into a venv, /opt/twingress: Debian's own python3 is "externally managed" (PEP 668) and
# refuses pip outside one, and in the python images it costs nothing.

ARG BUILD_IMAGE=python:3.11
ARG RUNTIME_IMAGE=python:3.11-slim

FROM ${BUILD_IMAGE} AS build
RUN python3 -m venv /opt/twingress
ENV PATH=/opt/twingress/bin:$PATH
WORKDIR /src
# The HTTP/2 stack compiled first, in a layer of its own: it needs only h2stack.py, Cython (the
# version setup.cfg's `compile` extra pins; tests/test_wheel.py checks they agree) and wheel,
# so a change to twingress's source reuses it instead of compiling h2, hpack and hyperframe again
# (minutes). h2stack.py fetches the pure wheels of the versions it pins and writes them compiled to
# /h2stack (docs/performance.md, "The compiled HTTP/2 stack"), with a constraints file that pins them.
# (DL3013: setuptools and wheel as the `compile` extra asks for them.)
COPY h2stack.py ./
# hadolint ignore=DL3013
RUN pip install --no-cache-dir "cython==3.3.1" "setuptools>=68" wheel \
    && python3 h2stack.py wheels /h2stack
# The dependencies next, from setup.cfg alone, so that a source change reuses this layer too:
# installed with the `compile` extra (mypy, its zope plugin, the stubs), because mypyc type-checks
# what it compiles against them, and fetched or built as wheels into /wheels for the runtime stage,
# h2, hpack and hyperframe from /h2stack (the pinned versions; a platform wheel ranks above the
# index's pure one of the same version). Reading setup.cfg builds an empty twingress (no source
# yet): it is uninstalled and its wheel removed. setup.py (the compiled build's module lists) is not
# needed for that, so it comes with the source and a change to it reuses this layer. (DL3013: what
# is installed is this project's dependencies and extra, whose versions setup.cfg states.)
COPY pyproject.toml setup.cfg README.md ./
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[compile]" \
    && pip uninstall -y twingress \
    && pip wheel --no-cache-dir --wheel-dir /wheels --find-links /h2stack --constraint /h2stack/constraints.txt . \
    && rm /wheels/twingress-*.whl
COPY setup.py ./
COPY ingress ./ingress
COPY twisted ./twisted
# twingress's wheel is the compiled build (setup.py, TWINGRESS_COMPILE=1): the request path's
# modules compiled by mypyc, 10-20% less CPU per request (docs/performance.md, "The compiled build"),
# with twisted/plugins/ingress_plugin.py in it (setup.cfg); built without isolation, in this venv
# where the type check finds the dependencies and /src as the only twingress. Then the wheels'
# digests: the runtime stage copies this file before it installs the wheels, so that a builder
# whose layer cache does not see into a RUN's bind mount from another stage (buildah 1.28 reused a
# stale install layer after the wheels had changed) still installs the new ones.
RUN TWINGRESS_COMPILE=1 pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels . \
    && sha256sum /wheels/*.whl > /wheels/SHA256SUMS

FROM ${RUNTIME_IMAGE}
# the version in setup.cfg (tests/test_wheel.py checks that they agree)
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="twingress" \
      org.opencontainers.image.description="Kubernetes ingress proxy with an embedded controller, on Twisted" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.source="https://github.com/twingress/twingress" \
      org.opencontainers.image.documentation="https://github.com/twingress/twingress#install-on-a-cluster"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/twingress/bin:$PATH

# The interpreter (the venv's python3 will be a symlink to it) gets the file capability
# cap_net_bind_service: a non-root process keeps a capability across execve only through its
# executable's file capabilities (Kubernetes sets no ambient capabilities), so without it
# `capabilities.add: [NET_BIND_SERVICE]` cannot let uid 10001 bind :80 and :443. It adds nothing
# beyond that permitted set, so no_new_privs (allowPrivilegeEscalation: false) does not strip it.
# Done before the wheels are installed, so that this layer (and its apt-get) is reused when only
# twingress changed.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libcap2-bin \
    && setcap cap_net_bind_service=+ep "$(readlink -f "$(command -v python3)")" \
    && apt-get purge -y --auto-remove libcap2-bin \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 twingress \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin twingress

# Only the wheels, from a bind mount: no index, no build tools, nothing left in a layer; pip and
# setuptools leave the venv again once they have installed them (nothing imports them at run time).
# Then fill Twisted's plugin cache now: the root filesystem is read-only at run time.
COPY --from=build /wheels/SHA256SUMS /opt/twingress-wheels.sha256
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python3 -m venv /opt/twingress \
    && pip install --no-cache-dir --no-index --find-links=/wheels "twingress==${VERSION}" \
    && pip uninstall -y -q pip setuptools \
    && python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"

# Numeric, so that runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
EXPOSE 80 443 10254

# --pidfile= : no pid file. With a read-only root it could not be written, and a stale one
# holding PID 1 would make twistd refuse to start after a container restart.
ENTRYPOINT ["twistd", "--pidfile=", "-n", "ingress"]
