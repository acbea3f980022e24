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
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import requests
from acme import challenges, client, crypto_util, errors, messages
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from josepy.jwk import JWK, JWKRSA
from twisted.logger import Logger

from ingress.acme.options import AcmeSettings
from ingress.acme.schedule import RATE_LIMITED, next_renewal_poll, renewal_at, retry_after_seconds
from ingress.acme.storage import account_key
from ingress.acme.tlsalpn import TLSALPN01

log = Logger(namespace=__name__)
USER_AGENT = "twingress"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # our own listener: never through an http_proxy
SELF_CHECK_SECONDS = 30.0
ORDER_SECONDS = 90.0
CHALLENGE_TYPES: dict[str, type[challenges.KeyAuthorizationChallenge]] = {"http-01": challenges.HTTP01, "tls-alpn-01": TLSALPN01}
NETWORK_SECONDS = 15  # per request (certbot's is 45): a stop waits for the order's thread, at most one request's time
BAD_NONCE_RETRIES = 10  # RFC 8555 6.5: a badNonce answer carries a fresh nonce to retry with; the library retries once only
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"]+)")


@dataclass
class Attempt:
    """
    What one order did, kept for its caller even when it fails: the requests sent, what the server's last error
    answer asked (its C{Retry-After} in seconds, a C{rateLimited} problem), the order's URL once it is placed.
    """

    requests: int = 0
    retry_after: Optional[float] = None
    rate_limited: bool = False
    order_url: str = ""
    on_order: Optional[Callable[[str], None]] = field(default=None, repr=False)  # told the URL of a new order (to resume it later)


class CountingNetwork(client.ClientNetwork):
    """certbot's network layer, counting the requests it sends, noting what error answers ask, and trusting --acme-ca-file."""

    def __init__(self, key: JWK, ca_file: str, attempt: Optional[Attempt] = None) -> None:
        super().__init__(key, user_agent=USER_AGENT, timeout=NETWORK_SECONDS)
        if ca_file:
            self.verify_ssl = ca_file  # type: ignore[assignment]  # requests takes a CA bundle's path as verify
        self.attempt = attempt if attempt is not None else Attempt()
        self.bad_nonces = 0
        self.last_status = 0  # of the last answer: what an error document from the directory's URL came with

    @property
    def requests(self) -> int:
        return self.attempt.requests

    def _send_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.attempt.requests += 1
        response = super()._send_request(method, url, *args, **kwargs)
        self.last_status = response.status_code
        if not response.ok:  # an error answer: what it asks of the next order (a 2xx Retry-After is the library's polling)
            self.attempt.retry_after = retry_after_seconds(response.headers.get("Retry-After"), datetime.datetime.now(datetime.UTC))
            self.attempt.rate_limited = _problem_type(response) == RATE_LIMITED
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


def _problem_type(response: Any) -> str:
    """The C{type} of a problem document (RFC 7807), '' when the body is not one."""
    try:
        body = json.loads(response.content)
    except (ValueError, TypeError):
        return ""
    return str(body.get("type", "")) if isinstance(body, dict) else ""


@dataclass
class Issued:
    """A certificate and its key (PEM), and what getting it cost."""

    chain_pem: bytes
    key_pem: bytes
    requests: int
    seconds: float
    new_account: bool = False  # the server made an account for the key (False: it knew the key)
    renew_at: Optional[datetime.datetime] = None  # when to renew it (L{ingress.acme.schedule.renewal_at})
    renewal_source: str = ""  # what said so: "renewalInfo" (RFC 9773) or "two thirds"
    bad_nonces: int = 0  # badNonce answers retried (RFC 8555 6.5)
    poll_at: Optional[datetime.datetime] = None  # when to ask for its renewalInfo again (None: the renewal comes first, or no renewalInfo)


def order_certificate(
    settings: AcmeSettings, hosts: tuple[str, ...], publish: Callable[[dict[str, tuple[str, str]]], None], self_check: Callable[[str, str, str], bool],
    key: Optional[rsa.RSAPrivateKey] = None, attempt: Optional[Attempt] = None, resume: str = "",
) -> Issued:
    """
    A certificate for C{hosts}: C{publish} puts the pending tokens (token: (host, key authorization)) where every worker serves
    them ({} withdraws them); C{self_check(host, token, answer)} says whether twingress serves a token yet.  C{key}: the
    account key (a cluster keeps it in a Secret), else the storage directory's.  C{attempt} is filled in as the order goes
    (what a failure's backoff needs).  C{resume}: the URL of an order placed before (a restart, a new leader), carried on
    while the server says it is pending or ready, else a new one is placed.
    """
    started = time.monotonic()
    attempt = attempt if attempt is not None else Attempt()
    if key is None:
        key, _ = account_key(settings.storage, settings.directory)
    account = JWKRSA(key=key)
    network = CountingNetwork(account, settings.ca_file, attempt)
    acme = client.ClientV2(directory_of(settings.directory, network), network)
    new_account = _account(acme, network, settings)
    certificate_key = ec.generate_private_key(ec.SECP256R1())
    key_pem = certificate_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    csr_pem = crypto_util.make_csr(key_pem, list(hosts))
    order = (_resumed(acme, resume, csr_pem, hosts) if resume else None) or _placed(acme, csr_pem, attempt)
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
    chain_pem = order.fullchain_pem.encode()
    renew_at, source, poll_at = _renewal(acme, chain_pem)
    return Issued(chain_pem, key_pem, network.requests, time.monotonic() - started, new_account, renew_at, source, network.bad_nonces, poll_at)


def _placed(acme: client.ClientV2, csr_pem: bytes, attempt: Attempt) -> messages.OrderResource:
    """A new order; its URL is told at once (so that a restart resumes it rather than place another)."""
    order = acme.new_order(csr_pem)
    attempt.order_url = order.uri or ""
    if attempt.on_order is not None and attempt.order_url:
        attempt.on_order(attempt.order_url)
    return order


def _resumed(acme: client.ClientV2, url: str, csr_pem: bytes, hosts: tuple[str, ...]) -> Optional[messages.OrderResource]:
    """
    The order at C{url} (POST-as-GET), when it is still pending or ready for the same hosts; None (place a new one) when
    it is invalid, expired, valid already (its certificate's key died with the process that placed it), or unknown.
    """
    try:
        body = messages.Order.from_json(acme._post_as_get(url).json())  # noqa: SLF001 - the library's own POST-as-GET, signed by it
    except (errors.Error, ValueError) as error:  # a 404 for an order the server forgot is a problem document
        log.info("acme: the order {url} cannot be resumed ({error}); placing a new one", url=url, error=str(error))
        return None
    names = tuple(sorted(identifier.value for identifier in body.identifiers or ()))
    if body.status not in (messages.STATUS_PENDING, messages.STATUS_READY) or names != tuple(sorted(hosts)):
        log.info("acme: the order {url} is {status}; placing a new one", url=url, status=body.status.name if body.status else "?")
        return None
    authorizations = [acme._authzr_from_response(acme._post_as_get(authz), uri=authz) for authz in body.authorizations]  # noqa: SLF001 - as new_order does
    log.info("acme: resuming the order {url} ({status})", url=url, status=body.status.name)
    return messages.OrderResource(body=body, uri=url, authorizations=authorizations, csr_pem=csr_pem)


def _renewal(acme: client.ClientV2, chain_pem: bytes) -> tuple[datetime.datetime, str, Optional[datetime.datetime]]:
    """
    When to renew the certificate: the server's renewalInfo (RFC 9773) where it offers it, else two thirds of its lifetime;
    and when to ask for the renewalInfo again (its answer's Retry-After, bounded: L{next_renewal_poll}).
    """
    leaf = x509.load_pem_x509_certificate(chain_pem)
    now = datetime.datetime.now(datetime.UTC)
    suggested, retry_after = _asked(acme, chain_pem)
    source = "renewalInfo" if suggested is not None else "two thirds"
    renew_at = renewal_at(leaf.not_valid_before_utc, leaf.not_valid_after_utc, suggested)
    offered = "renewalInfo" in acme.directory.to_partial_json()
    return renew_at, source, next_renewal_poll(now, retry_after, renew_at) if offered else None


def _asked(acme: client.ClientV2, chain_pem: bytes) -> tuple[Optional[datetime.datetime], Optional[datetime.datetime]]:
    """The server's suggested renewal time (None: no renewalInfo, or not answered) and when to ask again (UTC)."""
    try:
        suggested, retry_after = acme.renewal_time(chain_pem)
    except Exception as error:  # noqa: BLE001 - the certificate is issued: a broken renewalInfo only loses the server's advice
        log.warn("acme: renewalInfo of the certificate not answered ({error}); renewing at two thirds of its lifetime", error=str(error.__cause__ or error))
        later = getattr(error, "retry_after", None)
        return None, later.astimezone(datetime.UTC) if isinstance(later, datetime.datetime) else None
    return suggested, retry_after.astimezone(datetime.UTC)  # the library's is local time


def renewal_again(
    settings: AcmeSettings, chain_pem: bytes, key: rsa.RSAPrivateKey, renew_at: datetime.datetime,
) -> tuple[datetime.datetime, Optional[datetime.datetime]]:
    """
    (Blocking.) The renewal time of an issued certificate (now due at C{renew_at}) and its next renewalInfo check, asked
    of the server again (RFC 9773 4.3.3): a window it moved, e.g. after a revocation, is what is returned.  A server that
    does not answer now keeps C{renew_at} and is asked again later (L{next_renewal_poll}).
    """
    leaf = x509.load_pem_x509_certificate(chain_pem)
    now = datetime.datetime.now(datetime.UTC)
    network = CountingNetwork(JWKRSA(key=key), settings.ca_file)
    try:
        acme = client.ClientV2(directory_of(settings.directory, network), network)
    except ValueError as error:
        log.warn("acme: renewalInfo not asked for again: {error}", error=str(error))
        return renew_at, next_renewal_poll(now, None, renew_at)
    suggested, retry_after = _asked(acme, chain_pem)
    if suggested is not None:
        renew_at = renewal_at(leaf.not_valid_before_utc, leaf.not_valid_after_utc, suggested)
    return renew_at, next_renewal_poll(now, retry_after, renew_at)


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
