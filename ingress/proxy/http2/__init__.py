"""
HTTP/2 from clients, on the C{h2} library's state machine (never a framer of our own).

An HTTP/2 request is turned into the same L{ingress.proxy.message.h1.Head} an
HTTP/1.1 request is parsed into, and from there takes the same path: routing
and policies (L{ingress.proxy.request.routed}), and an L{ingress.proxy.request.exchange.Exchange}
for endpoint choice, retries and the keep-alive pools, whose client side is the stream
(L{stream}).  Only the framing differs.
"""
