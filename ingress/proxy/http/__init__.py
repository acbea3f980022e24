"""
The HTTP data plane: strict HTTP/1.1 framing (L{h1}), the client-side protocol
(L{server}), the upstream side (L{relay}, L{upstream}), and the head rewriting,
answers and limits they share.
"""
