# -*- test-case-name: tests.proxy.test_acme -*-
"""
One certificate order with certbot's C{acme} client (blocking: run in the issuer's thread, never on the reactor).

The account (its key in the storage directory) is registered on first use and found again by its key
after a restart (the server answers an existing key with its account).  Each challenge (the
C{--acme-challenge} type: an HTTP-01 token, or a TLS-ALPN-01 certificate, L{ingress.acme.tlsalpn})
is published, then checked through twingress's own listener until it answers, and only then is
the server asked to validate: a challenge that is not served yet never spends a failed validation.
"""

from __future__ import annotations

import datetime
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import requests
from acme import challenges, client, crypto_util, errors, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from josepy.jwk import JWK, JWKRSA

from ingress.acme.options import AcmeSettings
from ingress.acme.storage import account_key
from ingress.acme.tlsalpn import TLSALPN01

USER_AGENT = "twingress"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # our own listener: never through an http_proxy
SELF_CHECK_SECONDS = 30.0
ORDER_SECONDS = 90.0
CHALLENGE_TYPES: dict[str, type[challenges.KeyAuthorizationChallenge]] = {"http-01": challenges.HTTP01, "tls-alpn-01": TLSALPN01}
NETWORK_SECONDS = 15  # per request (certbot's is 45): a stop waits for the order's thread, at most one request's time
BAD_NONCE_RETRIES = 10  # RFC 8555 6.5: a badNonce answer carries a fresh nonce to retry with; the library retries once only
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"]+)")


class CountingNetwork(client.ClientNetwork):
    """certbot's network layer, counting the requests it sends and trusting --acme-ca-file."""

    def __init__(self, key: JWK, ca_file: str) -> None:
        super().__init__(key, user_agent=USER_AGENT, timeout=NETWORK_SECONDS)
        if ca_file:
            self.verify_ssl = ca_file  # type: ignore[assignment]  # requests takes a CA bundle's path as verify
        self.requests = 0
        self.bad_nonces = 0
        self.last_status = 0  # of the last answer: what an error document from the directory's URL came with

    def _send_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        response = super()._send_request(method, url, *args, **kwargs)
        self.last_status = response.status_code
        return response

    def post(self, *args: Any, **kwargs: Any) -> Any:
        """The library's signed POST, retried with the server's fresh nonce after each badNonce answer (up to L{BAD_NONCE_RETRIES})."""
        for _ in range(BAD_NONCE_RETRIES):
            try:
                return self._post_once(*args, **kwargs)
            except messages.Error as error:
                if error.code != "badNonce":
                    raise
                self.bad_nonces += 1
        return self._post_once(*args, **kwargs)


@dataclass
class Issued:
    """A certificate and its key (PEM), and what getting it cost."""

    chain_pem: bytes
    key_pem: bytes
    requests: int
    seconds: float
    new_account: bool = False  # the server made an account for the key (False: it knew the key)
    bad_nonces: int = 0  # badNonce answers retried (RFC 8555 6.5)


def order_certificate(
    settings: AcmeSettings, hosts: tuple[str, ...], publish: Callable[[dict[str, tuple[str, str]]], None], self_check: Callable[[str, str, str], bool],
    key: Optional[rsa.RSAPrivateKey] = None,
) -> Issued:
    """
    A certificate for C{hosts}: C{publish} puts the pending tokens (token: (host, key authorization)) where every worker serves
    them ({} withdraws them); C{self_check(host, token, answer)} says whether twingress serves a token yet.  C{key}: the
    account key (a cluster keeps it in a Secret), else the storage directory's.
    """
    started = time.monotonic()
    if key is None:
        key, _ = account_key(settings.storage, settings.directory)
    account = JWKRSA(key=key)
    network = CountingNetwork(account, settings.ca_file)
    acme = client.ClientV2(directory_of(settings.directory, network), network)
    new_account = _account(acme, network, settings)
    certificate_key = ec.generate_private_key(ec.SECP256R1())
    key_pem = certificate_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    order = acme.new_order(crypto_util.make_csr(key_pem, list(hosts)))
    pending = _pending(order, account, CHALLENGE_TYPES[settings.challenge])
    try:
        publish({token: (host, answer) for host, token, answer, _ in pending})
        for host, token, answer, _ in pending:
            _wait_served(self_check, host, token, answer)
        for _, _, _, (challenge, response) in pending:
            acme.answer_challenge(challenge, response)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=ORDER_SECONDS)
        order = acme.poll_and_finalize(order, deadline=deadline)
    finally:
        publish({})
    return Issued(order.fullchain_pem.encode(), key_pem, network.requests, time.monotonic() - started, new_account, network.bad_nonces)


def directory_of(url: str, network: CountingNetwork) -> messages.Directory:
    """
    The server's directory, or a ValueError that says in one line why there is none: unreachable (the
    socket's error), untrusted (TLS: --acme-ca-file), or an answer that is not an ACME directory.
    """
    try:
        directory = client.ClientV2.get_directory(url, network)
    except requests.exceptions.SSLError as error:
        raise ValueError(f"the ACME directory {url}: its TLS certificate is not trusted ({_reason(error)}; --acme-ca-file names the CAs to trust)") from None
    except (errors.ClientError, messages.Error, ValueError) as error:  # ValueError: a body that is no JSON (requests' JSONDecodeError is one)
        said = " ".join(str(error).split())
        said = f"HTTP {network.last_status}" + (f" ({said})" if said and said != "about:blank" and not said.startswith("<Response") else "")
        raise ValueError(f"the ACME directory {url} does not answer as one: {said}") from None
    except requests.exceptions.RequestException as error:
        raise ValueError(f"the ACME directory {url} is unreachable: {_reason(error)}") from None
    missing = [name for name in ("newNonce", "newAccount", "newOrder") if name not in directory.to_partial_json()]
    if missing:
        raise ValueError(f"the ACME directory {url} is not an ACME directory (RFC 8555 7.1.1): no {', '.join(missing)}")
    return directory


def _reason(error: Exception) -> str:
    """The socket's or TLS's own words from a requests error (its text nests urllib3's), else the whole text."""
    text = " ".join(str(error).split())
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    verify = re.search(r"certificate verify failed: ([^(]+)", text)
    return f"certificate verify failed: {verify.group(1).strip()}" if verify else text


def _account(acme: client.ClientV2, network: CountingNetwork, settings: AcmeSettings) -> bool:
    """
    Register the key's account, or find it again (the server answers a known key with its URL); whether it is new.
    With --acme-eab-kid, the account is bound to that external account (RFC 8555 7.3.4) by the library's EAB.
    """
    binding = None
    if settings.eab_kid:
        assert network.key is not None  # the account key signs every request
        binding = messages.ExternalAccountBinding.from_data(network.key.public_key(), settings.eab_kid, settings.eab_hmac_key, acme.directory)
    registration = messages.NewRegistration.from_data(email=settings.email or None, terms_of_service_agreed=True, external_account_binding=binding)
    try:
        acme.new_account(registration)
    except errors.ConflictError as existing:
        network.account = messages.RegistrationResource(uri=existing.location, body=messages.Registration())
        return False
    return True


def _pending(order: messages.OrderResource, key: JWK, kind: type[challenges.KeyAuthorizationChallenge]) -> list[tuple[str, str, str, tuple[messages.ChallengeBody, Any]]]:
    """(host, token, key authorization, (challenge, response)) of each authorization not valid yet."""
    pending = []
    for authorization in order.authorizations:
        if authorization.body.status == messages.STATUS_VALID:
            continue
        host = authorization.body.identifier.value
        for challenge in authorization.body.challenges:
            if isinstance(challenge.chall, kind):
                response, answer = challenge.response_and_validation(key)
                pending.append((host, challenge.chall.encode("token"), answer, (challenge, response)))
                break
        else:
            raise ValueError(f"the ACME server offers no {kind.typ} challenge for {host}")
    return pending


def _wait_served(self_check: Callable[[str, str, str], bool], host: str, token: str, answer: str) -> None:
    """Poll twingress's own listener until it answers the token (the table reached every worker), or fail."""
    deadline = time.monotonic() + SELF_CHECK_SECONDS
    while not self_check(host, token, answer):
        if time.monotonic() > deadline:
            raise ValueError(f"the challenge {token} of {host} is not served by this node's listener after {SELF_CHECK_SECONDS:.0f}s")
        time.sleep(0.2)


def fetch_token(address: str, http_port: int, host: str, token: str, answer: str) -> bool:
    """Whether C{GET /.well-known/acme-challenge/TOKEN} with C{Host: host} on the --http listener answers C{answer}."""
    literal = f"[{address}]" if ":" in address else address
    request = urllib.request.Request(f"http://{literal}:{http_port}/.well-known/acme-challenge/{token}", headers={"Host": host})
    try:
        with _DIRECT.open(request, timeout=5) as response:
            return bool(response.status == 200 and response.read().decode(errors="replace").strip() == answer)
    except (urllib.error.URLError, OSError):
        return False
