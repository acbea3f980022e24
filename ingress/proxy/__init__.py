"""
The data plane's Twisted protocols, one subpackage per kind of listener:
L{http} (HTTP/1.1 to clients and upstreams), L{tls} (SNI, termination,
passthrough) and L{streams} (TCP and UDP).  L{idle} holds the cheap timeouts
they share.
"""
