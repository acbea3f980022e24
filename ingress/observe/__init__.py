"""
What the process tells its operator: Prometheus metrics (L{metrics},
L{request_metrics}), the process log (L{logs}), the access log (L{accesslog})
and the admin listener (L{admin}: health, readiness, metrics, the route dump).
"""
