# -*- test-case-name: tests.proxy.test_acme -*-
"""The ACME issuer's command-line options, checked before anything starts (one line and exit 2 when wrong)."""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

from cryptography import x509
from twisted.python import usage

ACME_PARAMETERS: list[list[Any]] = [
    ["acme-directory", None, "", "Directory URL of an ACME server (RFC 8555): Ingresses annotated twingress.io/acme get certificates from it ('' = no ACME)."],
    ["acme-email", None, "", "Contact address of the ACME account."],
    ["acme-ca-file", None, "", "PEM file of the CAs that sign the ACME server's own TLS certificate (a private server such as Pebble; '' = the system's)."],
    ["acme-agree-tos", None, "false", "true: agree to the ACME server's terms of service (required to create the account)."],
    ["acme-challenge", None, "http-01", "Challenge type: http-01 (on the --http listener) or tls-alpn-01 (RFC 8737, on --https, when only :443 is reachable)."],
    ["acme-storage", None, "", "Directory for the ACME account key, the certificates and the pending tokens (needed with --manifests; a cluster keeps them in Secrets)."],
    ["acme-eab-kid", None, "", "Key identifier of the external account to bind the ACME account to (ZeroSSL, Google, Sectigo; RFC 8555 7.3.4); with --acme-eab-hmac-key-file."],
    ["acme-eab-hmac-key-file", None, "", "File holding the external account's HMAC key, base64url as the CA gives it; with --acme-eab-kid."],
]


@dataclass(frozen=True, slots=True)
class AcmeSettings:
    """What the issuer needs, checked: the directory URL, the account's contact, the trust, the storage."""

    directory: str
    email: str
    ca_file: str
    storage: str
    challenge: str = "http-01"
    self_check_host: str = "127.0.0.1"  # where the self check reaches the --http listener (its interface, or loopback)
    tls_self_check_host: str = "127.0.0.1"  # where the TLS-ALPN-01 self check reaches the --https listener
    eab_kid: str = ""  # external account binding: the key identifier ("" = none)
    eab_hmac_key: str = field(default="", repr=False)  # and its HMAC key, base64url (a secret: never in a repr or a log)


def acme_settings(options: Any, source: str) -> Optional[AcmeSettings]:
    """The checked settings, None without --acme-directory; raises UsageError naming the option."""
    directory = options["acme-directory"]
    if not directory:
        others = [name for name in ("acme-email", "acme-ca-file", "acme-storage", "acme-eab-kid", "acme-eab-hmac-key-file") if options[name]]
        if others:
            raise usage.UsageError(f"--{others[0]} needs --acme-directory")
        return None
    if urlsplit(directory).scheme not in ("http", "https") or not urlsplit(directory).netloc:
        raise usage.UsageError(f"--acme-directory {directory!r} is not an http(s) URL")
    if options["acme-agree-tos"] not in ("true", "false"):
        raise usage.UsageError("--acme-agree-tos must be true or false")
    if options["acme-agree-tos"] != "true":
        raise usage.UsageError("--acme-directory needs --acme-agree-tos true: an ACME account is only created on the server's terms of service")
    challenge = options["acme-challenge"]
    if challenge not in ("http-01", "tls-alpn-01"):
        raise usage.UsageError(f"--acme-challenge {challenge!r}: http-01 or tls-alpn-01 (DNS-01 is out of scope)")
    listener = "http" if challenge == "http-01" else "https"  # where the validation requests come
    if not any(name == listener for name in options["reserved-ports"].values()):
        raise usage.UsageError(f"--acme-challenge {challenge} needs the --{listener} listener on a port of its own (the validation requests come to it)")
    if options[listener].startswith("haproxy:"):
        raise usage.UsageError(f"--acme-challenge {challenge} with a PROXY-protocol --{listener} listener is not supported yet (the self check connects without the PROXY header)")
    if source == "manifests" and not options["acme-storage"]:
        raise usage.UsageError("--acme-directory with --manifests needs --acme-storage DIR (the account key and the certificates are kept there)")
    if source != "manifests" and options["acme-storage"]:
        raise usage.UsageError("--acme-storage is for --manifests: in a cluster the account key and the certificates are Secrets")
    if source != "manifests" and options["generate-ingresses"] == "false" and options["update-status"] == "false":
        raise usage.UsageError("--acme-directory in a cluster needs the controllers (only the leader orders): not both --generate-ingresses and --update-status false")
    if options["acme-storage"]:
        _check_storage(options["acme-storage"])
    if options["acme-ca-file"]:
        _check_ca_file(options["acme-ca-file"])
    return AcmeSettings(
        directory, options["acme-email"], options["acme-ca-file"], options["acme-storage"], challenge,
        self_check_host=_local_address(options["http"]), tls_self_check_host=_local_address(options["https"]),
        eab_kid=options["acme-eab-kid"], eab_hmac_key=_eab_hmac_key(options["acme-eab-kid"], options["acme-eab-hmac-key-file"]),
    )


def _eab_hmac_key(kid: str, path: str) -> str:
    """The external account's HMAC key (base64url, checked), "" without EAB; both options or neither."""
    if bool(kid) != bool(path):
        given, missing = ("--acme-eab-kid", "--acme-eab-hmac-key-file") if kid else ("--acme-eab-hmac-key-file", "--acme-eab-kid")
        raise usage.UsageError(f"{given} needs {missing}: external account binding takes both")
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            key = f.read().strip().decode("ascii")
    except OSError as error:
        raise usage.UsageError(f"--acme-eab-hmac-key-file {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        key = "?"
    try:
        decoded = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)) if re.fullmatch(r"[A-Za-z0-9_-]+", key) else b""
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise usage.UsageError(f"--acme-eab-hmac-key-file {path!r} holds no base64url HMAC key")
    return key


def _local_address(description: str) -> str:
    """The address this process reaches a listener (--http, --https) at: the interface it binds, loopback for every address."""
    for argument in re.split(r"(?<!\\):", description)[1:]:  # an escaped colon is part of a value
        key, equals, value = argument.partition("=")
        value = value.replace("\\", "")  # an IPv6 interface is written with escaped colons (interface=\\:\\:1)
        if equals and key == "interface" and value not in ("", "0.0.0.0"):
            return "::1" if value == "::" else value
    return "::1" if description.startswith("tcp6:") else "127.0.0.1"


def _check_storage(path: str) -> None:
    """The storage directory exists (or can be made) and is writable: the account key must survive a restart."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as error:
        raise usage.UsageError(f"--acme-storage {path!r}: {error.strerror or error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise usage.UsageError(f"--acme-storage {path!r} is not writable")


def _check_ca_file(path: str) -> None:
    """The CA file holds at least one PEM certificate: a garbage file would only fail at the first order."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise usage.UsageError(f"--acme-ca-file {path!r}: {error.strerror or error}") from None
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise usage.UsageError(f"--acme-ca-file {path!r} holds no PEM certificate") from None
