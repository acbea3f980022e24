"""
The processes of twingress, above the proxy: the debounced table builder (L{builder}), the worker
pool and the workers' data planes, the graceful shutdown (L{drain}) and the hand-over of the
listening sockets to a successor.  L{ingress.tap} puts them together; what the proxy itself needs
of a process (the live table, the reactor's type, sockets) is L{ingress.runtime}, below it.
"""
