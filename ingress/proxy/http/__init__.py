"""
The HTTP data plane: strict HTTP/1.1 framing (L{h1}), the client connection (L{server}), one
L{exchange} per request with its collaborators (L{failures}, L{deadlines}, L{steps}), the
upstream side (L{upstream}), and the head rewriting, answers and limits they share.
"""
