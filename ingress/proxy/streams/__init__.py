"""
Raw TCP and UDP streams: the listener manager (L{listeners}), the relays
(L{tcp}, L{udp}) and the PROXY protocol header they can send (L{proxyproto}).
"""
