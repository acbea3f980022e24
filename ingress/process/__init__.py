"""
The process wiring between the sources and the listeners: the debounced table
builder (L{builder}), the live table every listener reads (L{live}) and the
graceful shutdown (L{drain}).  L{ingress.tap} puts them together.
"""
