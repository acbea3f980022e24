# -*- test-case-name: tests.unit.test_client_auth -*-
"""
Client certificates of a host (ingress-nginx's "Client Certificate Authentication": auth-tls-*).

Applied per host, as ingress-nginx applies it (nginx's server-level ssl_verify_client): the
TLS handshake of the host asks for a certificate and trusts the CAs of C{auth-tls-secret}'s
C{ca.crt}; whether a request may pass is decided at the HTTP level, as nginx does:

- C{on} (the default): no certificate, or one that does not verify, is a 400 (or a redirect
  to C{auth-tls-error-page});
- C{optional}: no certificate passes (C{ssl-client-verify: NONE}); one that does not verify is a 400;
- C{optional_no_ca}: a certificate of an unknown CA passes too, its verification result sent upstream;
  other errors (an expired certificate) are a 400;
- C{off}: nothing is asked.

C{auth-tls-match-cn} (a regex on the subject DN) answers 403 when it does not match.  The upstream
receives C{ssl-client-verify}, C{ssl-client-subject-dn}, C{ssl-client-issuer-dn} and, with
C{auth-tls-pass-certificate-to-upstream}, C{ssl-client-cert} (the URL-encoded PEM); a client's own
fields of those names are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

VERIFY_MODES = ("on", "off", "optional", "optional_no_ca")


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """One host's client-certificate settings."""

    ca_pem: bytes
    secret: str  # "namespace/name" of the CA bundle (for /debug/routes)
    verify: str = "on"
    depth: int = 1
    error_page: str = ""
    pass_certificate: bool = False
    match_cn: Optional[re.Pattern[str]] = None

    @property
    def asks(self) -> bool:
        """Whether the handshake asks for a certificate (every mode but off)."""
        return self.verify != "off"

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"secret": self.secret, "verify": self.verify, "depth": self.depth}
        if self.error_page:
            shown["errorPage"] = self.error_page
        if self.match_cn is not None:
            shown["matchCN"] = self.match_cn.pattern
        if self.pass_certificate:
            shown["passCertificate"] = True
        return shown
