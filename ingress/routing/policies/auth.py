# -*- test-case-name: tests.unit.test_basic_auth -*-
"""
Basic authentication of a route (ingress-nginx's "Authentication": auth-type basic).

The users and their password hashes come from a Secret (an htpasswd file, or a map
of user to hash), read when the table is built.  Checking a password is the proxy's
job (L{ingress.proxy.request.auth}): hashes like bcrypt cost milliseconds, so it runs
off the reactor thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from passlib.context import CryptContext

HASHES = CryptContext(schemes=["bcrypt", "apr_md5_crypt", "ldap_sha1", "sha256_crypt", "sha512_crypt", "des_crypt"])
"""The password hashes of htpasswd files that nginx and Apache read (plain text is not one of them here)."""


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """Who may pass (C{users}: name and hash as stored) and the realm the 401 names."""

    realm: str
    users: tuple[tuple[str, str], ...]
    secret: str  # "namespace/name": where the users come from (for /debug/routes; never the hashes)
    _table: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_table", dict(self.users))

    def hash_for(self, user: str) -> Optional[str]:
        return self._table.get(user)

    @property
    def challenge(self) -> bytes:
        """The WWW-Authenticate field of a 401 (RFC 7617), CRLF-terminated."""
        realm = self.realm.replace("\\", "\\\\").replace('"', '\\"')
        return b'WWW-Authenticate: Basic realm="%s", charset="UTF-8"\r\n' % realm.encode("utf-8")

    def to_json(self) -> dict[str, object]:
        return {"realm": self.realm, "secret": self.secret, "users": len(self.users)}
