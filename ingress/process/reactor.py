"""
The reactor as this process uses it, as one type for the checker.

Twisted splits the reactor into many interfaces; modules here take the one
reactor object and use several of them (timers, thread hand-over, TCP), so
the parameter is typed with their union instead of C{Any}.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorFromThreads, IReactorTCP, IReactorTime


class IProcessReactor(IReactorTime, IReactorFromThreads, IReactorTCP):
    """Timers, calls from other threads, and TCP connections: what the builder, sources and pools use."""
