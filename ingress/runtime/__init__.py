"""
What every twingress process runs on, below the proxy and the processes that wire it: the live
table's pointer that listeners read (L{live}), the reactor's type (L{reactor}) and the listening
sockets (L{sockets}: bound, described, their errors).  It imports nothing of ingress above
L{ingress.routing}, so that L{ingress.proxy} and L{ingress.observe} can use it and
L{ingress.process} (the builder, the workers, the drain, the hand-over) sits above them all.
"""
