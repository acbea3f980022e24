"""
The reactor as this process uses it, as one type for the checker.

Twisted splits the reactor into many interfaces; modules here take the one
reactor object and use several of them (timers, thread hand-over, TCP), so
the parameter is typed with their union instead of C{Any}.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorCore, IReactorFromThreads, IReactorProcess, IReactorSocket, IReactorTCP, IReactorTime


class IProcessReactor(IReactorCore, IReactorTime, IReactorFromThreads, IReactorTCP, IReactorSocket, IReactorProcess):
    """Running, timers, calls from threads, TCP, adopted sockets, processes: what the builder, sources, pools and workers use."""
