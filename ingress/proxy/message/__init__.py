"""
The HTTP message as bytes, the form every step of the request path reads: strict HTTP/1.1 syntax
(L{h1}: the request's L{h1.Head}, which each framing makes, the HTTP/2 stream from its header
list too, and the endpoints' answers), where a head ends (L{headend}), chunked bodies
(L{chunked}), the request target (L{target}), single fields (L{fields}), this proxy's own answers
(L{responses}) and gzip (L{compression}).  Below L{ingress.proxy.request}; imports nothing of
the proxy's other packages.
"""
