"""
The request path every framing shares (HTTP/1.1 in L{ingress.proxy.http1}, HTTP/2 in
L{ingress.proxy.http2}): one L{exchange} per request, talking to its framing through
L{client.ClientSide}; the routing decision (L{routed}, L{admission}), its limits (L{limits}), the route's policies
(L{policy}, L{affinity}, L{mirror}, L{variables}, L{requestid}, L{trusted}, L{forwarding}), the
guards (L{guards}, L{auth}, L{extauth}, L{ratelimit}), the upstream side (L{upstream} pools,
L{sink}, L{ewma}, L{backend_tls}), failures and retries (L{failures}, L{retry}, L{deadlines},
L{errorpages}) and the access log's lines (L{accesslines}).  Imports neither framing.
"""
