"""
The states of an exchange (L{ingress.proxy.request.exchange.Exchange}): routing (HEAD), a guard
deciding (AUTH), the request body being read (BODY), the response awaited (AWAIT), a tunnel
after a 101 (TUNNEL), and over (CLOSED).
"""

from typing import Final

# Each a Final literal, not one unpacking of range(6): mypyc puts a Final literal in the code that
# reads it, where any other module-level name is a dict lookup in the module's globals at each use
# (an HTTP/2 request read these about 15 times).
HEAD: Final = 0
BODY: Final = 1
AWAIT: Final = 2
TUNNEL: Final = 3
CLOSED: Final = 4
AUTH: Final = 5  # a password being checked (reading paused)
