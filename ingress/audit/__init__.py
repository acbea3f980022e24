"""
C{twingress audit}: what twingress would do with a cluster, before it serves it.

The cluster (or a manifests directory) is read once (L{cluster}), the routing table is built by
L{ingress.routing.build} with the options C{twistd ingress} would take (L{ingress.options.build_arguments}),
and the table's own reports (its problems, the Ingresses it skipped, the routes it closed) become
every object's, annotation's and ConfigMap key's fate (L{fates}, L{report}), written as text, JSON,
Markdown or HTML (L{render}).  Read-only: it lists, and writes nothing.
"""
