"""The smallest end-to-end check: a request through twistd reaches an echo backend."""

import http.client
import json

from tests.support import Twingress


def test_request_reaches_backend_with_forwarding_headers(proxy: Twingress) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=5)
    conn.request("GET", "/hello?x=1", headers={"Host": "echo.test", "X-Forwarded-For": "6.6.6.6"})
    response = conn.getresponse()
    body = json.loads(response.read())
    assert response.status == 200
    assert body["path"] == "/hello" and body["host"] == "echo.test"
    assert body["headers"]["X-Forwarded-For"] == ["127.0.0.1"]  # a client's own value is replaced
    assert body["headers"]["X-Forwarded-Proto"] == ["http"]
    assert response.getheader("Date") and response.getheader("Server")
