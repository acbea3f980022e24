"""
The states of an exchange (L{ingress.proxy.http.exchange.Exchange}): routing (HEAD), a guard
deciding (AUTH), the request body being read (BODY), the response awaited (AWAIT), a tunnel
after a 101 (TUNNEL), and over (CLOSED).
"""

HEAD, BODY, AWAIT, TUNNEL, CLOSED, AUTH = range(6)  # AUTH: a password being checked (reading paused)
