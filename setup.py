"""
The build, with one option: C{TWINGRESS_COMPILE=1} compiles the request path's modules with mypyc.

Everything else (metadata, packages, dependencies) is in setup.cfg.  The
compiled build is the same source, type-checked by mypy --strict, turned into
C extension modules that import in place of the .py files; it runs the
per-request code (HTTP/1 parsing, forwarding heads, routing lookup, the access
log) 10-20% faster per core (bench/README.md).  The Docker image ships it, and
C{make test} runs every test on it, then the unit tests and the request path's
proxy tests again on the pure-Python build.  C{make run} builds it too where a
C compiler is present (C{make run PURE=1}: the pure build).

  make compiled   TWINGRESS_COMPILE=1 python setup.py build_ext --inplace
  make pure       removes the compiled modules again
"""

import os

from setuptools import setup

# The modules a keep-alive HTTP request runs through: the connection (server.py, whose one base
# is Twisted's Protocol), its response framing (h1response.py) and the request's Exchange (no base
# at all, so mypyc makes it a native class), and the X-Request-ID routing adds to it (requestid.py:
# ingress-nginx's generate-request-id is on by default).  A class compiled here must not need an interpreted
# base class together with a compiled one (mypyc refuses that).  The paths off the keep-alive one
# stay interpreted (failures.py, steps.py, deadlines.py), and so do the routing table's frozen
# dataclasses: compiled, they cannot be unpickled (mypyc's state setter assigns through the frozen
# __setattr__), and workers receive tables pickled.  The lookups each request makes in a table are
# compiled apart from them (lookup.py, on the tables' fields), and so is the path normalisation
# routing starts with (paths.py).
HOT_MODULES = [
    "ingress/proxy/message/h1.py",
    "ingress/proxy/message/headend.py",
    "ingress/proxy/message/chunked.py",
    "ingress/proxy/request/forwarding.py",
    "ingress/proxy/message/target.py",
    "ingress/proxy/message/responses.py",
    "ingress/speedups/fastwrite.py",
    "ingress/proxy/http1/server.py",
    "ingress/proxy/http1/h1response.py",
    "ingress/proxy/request/exchange.py",
    "ingress/proxy/request/admission.py",
    "ingress/proxy/request/limits.py",
    "ingress/proxy/request/routed.py",
    "ingress/proxy/request/requestid.py",
    "ingress/routing/lookup.py",
    "ingress/routing/paths.py",
    "ingress/proxy/request/upstream.py",
    "ingress/proxy/request/sink.py",
    "ingress/speedups/nativeprotocol.py",
    "ingress/proxy/idle.py",
    "ingress/observe/accesslog.py",
    "ingress/proxy/request/accesslines.py",
    "ingress/observe/request_metrics.py",
]

# The HTTP/2 connection, its streams and their upstreams (h2c and gRPC): twingress's own work per
# HTTP/2 request, between the h2 library (compiled by h2stack.py) and the exchange it shares with
# HTTP/1.1.  A group (one shared library) of their own, so that the HTTP/1.1 path's library stays
# the same code as without them: built into HOT_MODULES' group, the HTTP/1.1 rows measured 2-5%
# higher, no more than what two processes of the same code differ by here, but not a change to
# leave unexplained.  (bench/README.md, "eighth session": h2 over TLS 6.8% less CPU per request.)
# Both groups come from one mypyc run (separate=...): compiled apart, the HTTP/2 group saw the
# HTTP/1.1 group's modules as plain Python, and every call into them (h1.Head, h1.valid_host,
# route_and_admit...) went through the Python call protocol; compiled together, those are native
# calls through the other group's export table (h2 path: 15,000 instructions fewer per request).
# Not here: ingress/proxy/http2/goaway.py, twingress's subclass of h2's H2Connection, which h2stack.py
# makes an extension type: mypyc cannot compile a subclass of it (the process crashes constructing one).
HTTP2_MODULES = [
    "ingress/proxy/http2/connection.py",
    "ingress/proxy/http2/eventkinds.py",
    "ingress/proxy/http2/resets.py",
    "ingress/proxy/http2/stream.py",
    "ingress/proxy/http2/response.py",
    "ingress/proxy/http2/fields.py",
    "ingress/proxy/http2/validate.py",
    "ingress/proxy/http2/exchange.py",
    "ingress/proxy/http2/upstream.py",
]

ext_modules = []
if os.environ.get("TWINGRESS_COMPILE") == "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(HOT_MODULES + HTTP2_MODULES, opt_level="3", separate=[(HOT_MODULES, "twingress_hot"), (HTTP2_MODULES, "twingress_h2")])

setup(ext_modules=ext_modules)
