"""
The ConfigMap's C{log-format-upstream}, C{log-format-escape-json} and C{log-format-escape-none}
through twistd: a log pipeline that parsed ingress-nginx's lines parses ours.  Spec: ingress-nginx's
docs/user-guide/nginx-configuration/log-format.md (the default C{upstreaminfo} format and its
variables) and configmap.md ("log-format-upstream" and its JSON example, "log-format-escape-json",
"log-format-escape-none"); escaping as nginx's ngx_http_log_module documents C{escape=}.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
from collections.abc import Callable
from pathlib import Path

from ingress.routing.logformat import UPSTREAMINFO
from tests.support import EchoBackend, Manifests, Twingress
from tests.waiting import at_least

CONFIG = "default/ingress-nginx-controller"
# The line a pipeline for ingress-nginx's default format matches (e.g. the fluent-bit / Loki
# "k8s-nginx-ingress" parser, field for field as log-format.md lists them).
UPSTREAMINFO_LINE = re.compile(
    r'^(?P<remote_addr>[^ ]*) - (?P<remote_user>[^ ]*) \[(?P<time_local>[^\]]*)\] "(?P<method>\S+)(?: +(?P<path>[^\"]*?)(?: +\S*)?)?" '
    r'(?P<status>[^ ]*) (?P<body_bytes_sent>[^ ]*) "(?P<http_referer>[^\"]*)" "(?P<http_user_agent>[^\"]*)" '
    r"(?P<request_length>[^ ]*) (?P<request_time>[^ ]*) \[(?P<proxy_upstream_name>[^ ]*)\] \[(?P<proxy_alternative_upstream_name>[^ ]*)\] "
    r"(?P<upstream_addr>[^ ]*) (?P<upstream_response_length>[^ ]*) (?P<upstream_response_time>[^ ]*) (?P<upstream_status>[^ ]*) (?P<req_id>[^ ]*)$"
)
# configmap.md, "log-format-upstream": the JSON example, as given there.
JSON_EXAMPLE = (
    '{"time": "$time_iso8601", "remote_addr": "$proxy_protocol_addr", "x_forwarded_for": "$proxy_add_x_forwarded_for", "request_id": "$req_id",'
    ' "remote_user": "$remote_user", "bytes_sent": $bytes_sent, "request_time": $request_time, "status": $status, "vhost": "$host", "request_proto": "$server_protocol",'
    ' "path": "$uri", "request_query": "$args", "request_length": $request_length, "method": "$request_method", "http_referrer": "$http_referer",'
    ' "http_user_agent": "$http_user_agent" }'
)


def _config_map(data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress-nginx-controller", "namespace": "default"}, "data": data}


def _get(port: int, host: str, path: str, **headers: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": host, **headers})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _lines(path: Path, count: int, timeout: float = 5.0) -> list[str]:
    """The access log's lines once it has C{count}."""
    return at_least(lambda: path.read_text().splitlines() if path.exists() else [], count, f"lines in {path.name}", timeout=timeout, interval=0.1)


def _start(manifests: Manifests, twingress: Callable[..., Twingress], echo: EchoBackend, data: dict[str, str], log: Path) -> Twingress:
    manifests.write("all.yaml", *manifests.service("web", [echo.address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", _config_map(data))
    return twingress("--nginx-configmap", CONFIG, "--access-log", str(log))


def test_default_upstreaminfo_format_parses_as_ingress_nginx_s(
    manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend], tmp_path: Path
) -> None:
    """log-format.md: ingress-nginx's default format, set as log-format-upstream, gives lines its pipelines parse."""
    log = tmp_path / "access.log"
    proxy = _start(manifests, twingress, echo_pair[0], {"log-format-upstream": UPSTREAMINFO}, log)
    user = base64.b64encode(b"alice:secret").decode()
    assert _get(proxy.http_port, "plain.test", "/a?b=1", **{"User-Agent": 'say "hi"', "Referer": "http://r.test/", "Authorization": f"Basic {user}"}) == 200
    assert _get(proxy.http_port, "nowhere.test", "/", **{"X-Request-ID": "abc123"}) == 404
    lines = _lines(log, 2)
    assert len(lines) == 2, lines
    first, second = (UPSTREAMINFO_LINE.match(line) for line in lines)
    assert first is not None and second is not None, lines
    assert first["remote_addr"] == "127.0.0.1" and first["remote_user"] == "alice"
    assert re.fullmatch(r"\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}", first["time_local"])
    assert (first["method"], first["path"], first["status"]) == ("GET", "/a?b=1", "200")
    assert first["http_user_agent"] == 'say \\x22hi\\x22'  # nginx's default escape
    assert first["http_referer"] == "http://r.test/"
    assert first["proxy_upstream_name"] == "upstream-default-web-80" and first["proxy_alternative_upstream_name"] == ""
    assert first["upstream_addr"] == f"{echo_pair[0].address[0]}:{echo_pair[0].address[1]}" and first["upstream_status"] == "200"
    assert float(first["request_time"]) >= float(first["upstream_response_time"]) >= 0
    assert int(first["request_length"]) > 40 and int(first["body_bytes_sent"]) > 0
    assert re.fullmatch(r"[0-9a-f]{32}", first["req_id"])
    assert (second["status"], second["proxy_upstream_name"], second["upstream_addr"], second["req_id"]) == ("404", "-", "-", "abc123")


def test_json_example_with_escape_json_is_json(
    manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend], tmp_path: Path
) -> None:
    """configmap.md's JSON example with log-format-escape-json "true": each line is a JSON object, quotes escaped as JSON."""
    log = tmp_path / "access.log"
    proxy = _start(manifests, twingress, echo_pair[0], {"log-format-upstream": JSON_EXAMPLE, "log-format-escape-json": "true"}, log)
    assert _get(proxy.http_port, "plain.test", "/p/q?x=1", **{"User-Agent": 'a "quoted" \\ agent', "X-Forwarded-For": "192.0.2.1"}) == 200
    (line,) = _lines(log, 1)
    entry = json.loads(line)
    assert entry["http_user_agent"] == 'a "quoted" \\ agent' and entry["http_referrer"] == ""
    assert (entry["path"], entry["request_query"], entry["method"], entry["status"]) == ("/p/q", "x=1", "GET", 200)
    assert (entry["vhost"], entry["request_proto"], entry["remote_user"]) == ("plain.test", "HTTP/1.1", "")
    assert entry["x_forwarded_for"] == "192.0.2.1, 127.0.0.1"
    assert isinstance(entry["request_time"], float) and isinstance(entry["bytes_sent"], int) and entry["request_length"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", entry["time"])


def test_unknown_variable_is_refused_and_the_format_kept(
    manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend], tmp_path: Path
) -> None:
    """A variable twingress does not fill refuses the format (InvalidConfigKey naming it); lines keep --access-log-format."""
    log = tmp_path / "access.log"
    proxy = _start(manifests, twingress, echo_pair[0], {"log-format-upstream": "$remote_addr $geoip_country_code $ssl_cipher"}, log)
    assert _get(proxy.http_port, "plain.test", "/") == 200
    problems = [p for p in proxy.routes()["problems"] if p["reason"] == "InvalidConfigKey"]
    assert any("$geoip_country_code, $ssl_cipher" in p["message"] and "log-format-upstream" in p["message"] for p in problems), problems
    (line,) = _lines(log, 1)
    assert " route=default/plain " in line  # twingress's text format


def test_escape_none_writes_values_as_they_are(
    manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend], tmp_path: Path
) -> None:
    """log-format-escape-none "true": no escaping; and the format follows a ConfigMap edit live."""
    log = tmp_path / "access.log"
    proxy = _start(manifests, twingress, echo_pair[0], {"log-format-upstream": "ua=$http_user_agent", "log-format-escape-none": "true"}, log)
    assert _get(proxy.http_port, "plain.test", "/", **{"User-Agent": 'x"y'}) == 200
    assert _lines(log, 1) == ['ua=x"y']
    generation = proxy.generation()
    manifests.write("config.yaml", _config_map({"log-format-upstream": "ua=$http_user_agent"}))
    proxy.wait_generation_above(generation)
    assert _get(proxy.http_port, "plain.test", "/", **{"User-Agent": 'x"y'}) == 200
    assert _lines(log, 2)[1] == "ua=x\\x22y"
