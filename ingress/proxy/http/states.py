"""
The states of a client connection's request cycle (an HTTP/2 stream's too), shared by the
connection half (L{ingress.proxy.http.server}), the upstream half (L{ingress.proxy.http.relay})
and its failure steps (L{ingress.proxy.http.failures}).
"""

HEAD, BODY, AWAIT, TUNNEL, CLOSED, AUTH = range(6)  # AUTH: a password being checked (reading paused)
