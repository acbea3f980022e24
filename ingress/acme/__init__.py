"""
ACME (RFC 8555) in twingress: certificates for the Ingresses annotated C{twingress.io/acme: "true"}.

Without a cluster (C{--manifests DIR --acme-storage DIR}) the account key, the issued certificates
(as C{kubernetes.io/tls} Secret manifests) and the pending HTTP-01 tokens (a ConfigMap manifest) are
files in the storage directory, which the manifests source reads beside the manifests: a new
certificate or token reaches the table, the certificate store and every worker the way any edited
manifest does.  The ACME client (C{acme}, certbot's) is blocking: orders run in a thread.
"""
