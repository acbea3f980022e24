"""
HTTP/1.1 framing towards clients: the connection (L{server}: heads read, keep-alive, one
L{ingress.proxy.request.exchange.Exchange} at a time, its L{ingress.proxy.request.client.ClientSide}),
how a response is framed for it (L{h1response}) and the listener's factory (L{factory}).  Nothing
else imports it but the listeners' wiring; HTTP/2 (L{ingress.proxy.http2}) shares the request
path, not this.
"""
