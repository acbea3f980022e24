"""
Tests for trusted forwarding headers (L{ingress.routing.policies.trust}) and the ConfigMap keys that set them.

ingress-nginx's ConfigMap page (docs/user-guide/nginx-configuration/configmap.md): use-forwarded-headers,
enable-real-ip, forwarded-for-header, compute-full-forwarded-for, proxy-real-ip-cidr (default 0.0.0.0/0),
and nginx's realip module with real_ip_recursive on (the template sets it).
"""

from __future__ import annotations

import ipaddress

import pytest

from ingress.model import ConfigMap, ObjectMeta
from ingress.routing.nginx_config import read_nginx_config
from ingress.routing.policies.trust import ForwardedTrust

LB = ForwardedTrust((ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")))


@pytest.mark.parametrize(
    ("peer", "hops", "client"),
    [
        ("10.0.0.1", ["203.0.113.7"], "203.0.113.7"),
        ("10.0.0.1", ["198.51.100.1", "203.0.113.7", "10.1.2.3"], "203.0.113.7"),  # recursive: skip trusted hops from the right
        ("10.0.0.1", ["10.9.9.9", "10.1.1.1"], "10.9.9.9"),  # all trusted: the first
        ("10.0.0.1", [], "10.0.0.1"),
        ("192.0.2.1", ["203.0.113.7"], "192.0.2.1"),  # an untrusted peer's header is not believed
        ("10.0.0.1", ["not-an-ip"], "10.0.0.1"),
        ("fd00::1", ["2001:db8::7"], "2001:db8::7"),
    ],
)
def test_the_client_address(peer: str, hops: list[str], client: str) -> None:
    assert LB.client(peer, hops) == client


def _config(data: dict[str, str]):  # type: ignore[no-untyped-def]
    config_map = ConfigMap(ObjectMeta("ingress-nginx", "controller"), tuple(data.items()))
    return read_nginx_config({("ingress-nginx", "controller"): config_map}, ("ingress-nginx", "controller"))


def test_no_trust_unless_asked() -> None:
    assert _config({})[0].trust is None


def test_use_forwarded_headers_trusts_everyone_by_default() -> None:
    trust = _config({"use-forwarded-headers": "true"})[0].trust
    assert trust is not None and trust.pass_headers and trust.trusts("198.51.100.9") and trust.header == b"x-forwarded-for"


def test_the_trust_keys() -> None:
    config, problems = _config(
        {"enable-real-ip": "true", "forwarded-for-header": "CF-Connecting-IP", "proxy-real-ip-cidr": "10.0.0.0/8, 192.168.1.1", "compute-full-forwarded-for": "true"}
    )
    trust = config.trust
    assert trust is not None and problems == []
    assert (trust.pass_headers, trust.header, trust.append) == (False, b"cf-connecting-ip", True)
    assert trust.trusts("192.168.1.1") and not trust.trusts("192.168.1.2")


def test_use_proxy_protocol_is_a_listener_setting_of_the_table() -> None:
    config, problems = _config({"use-proxy-protocol": "true"})
    assert problems == [] and config.listener is not None and config.listener.proxy_protocol


def test_a_bad_cidr_is_reported_and_trusts_nobody() -> None:
    """Fail closed: an unreadable proxy-real-ip-cidr never falls back to its default, 0.0.0.0/0."""
    config, problems = _config({"use-forwarded-headers": "true", "proxy-real-ip-cidr": "10.0.0.0/33"})
    assert [p.reason for p in problems] == ["InvalidConfigKey"] and "no forwarding header is trusted" in problems[0].message
    assert config.trust is None
