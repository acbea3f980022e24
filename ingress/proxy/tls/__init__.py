"""
The TLS listener: its front door that reads the ClientHello's server name
(L{front}, L{sni}) and either passes the stream through or terminates it with
the SNI-selected certificate (L{termination}).
"""
