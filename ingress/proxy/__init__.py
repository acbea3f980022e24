"""
The data plane's Twisted protocols, one subpackage per kind of listener:
L{http1} (HTTP/1.1 to clients), L{http2} (HTTP/2 to clients, and to gRPC and
h2c endpoints), L{tls} (SNI, termination, passthrough) and L{streams} (TCP and
UDP).  Both HTTP framings share L{request} (the request path: exchange,
policies, guards, upstream pools, failures), over L{message} (the HTTP message
as bytes).  L{idle} holds the cheap timeouts they share.
"""
