"""
A twingress whose apiserver refuses every connection, as issue 61 found it: "216 `list/watch
failed` warnings in ~13 s, 430 in 20 s" (every informer retried about once a second for its first
minute).  Now each informer says once that it fails, and the source says once every 30 s how many
cannot reach the apiserver; the test waits for that summary (about 30 s) and counts every line about
the informers' connection up to it.  A real process, a real port that refuses; no apiserver needed.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.kube.twingress import wait_until
from tests.support import ROOT, free_port, refusing_address, twistd_command

SUMMARY = re.compile(r"\] (\d+) of (\d+) informers cannot list/watch from the apiserver at (\S+) for (\d+) s: (.*)")
ABOUT_THE_API = re.compile(r"list/watch|informers cannot|Retrying \(|ConnectionPool")


def _kubeconfig(path: Path, server: str) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "refusing", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "someone", "user": {"token": "not-checked"}}],
        "contexts": [{"name": "refusing", "context": {"cluster": "refusing", "user": "someone"}}],
        "current-context": "refusing",
    }
    path.write_text(json.dumps(document))
    return path


def test_a_refusing_apiserver_is_one_line_per_informer_and_one_summary(tmp_path: Path) -> None:
    host, port = refusing_address()
    server = f"https://{host}:{port}"
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", server)
    log_path = tmp_path / "twingress.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            twistd_command(["--kubeconfig", str(kubeconfig)], free_port(), free_port(), ()), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        summary = wait_until(lambda: SUMMARY.search(log_path.read_text(errors="replace")), 90, "the outage summary")
        text = log_path.read_text(errors="replace")
    finally:
        process.terminate()
        process.wait(15)
    lines = [line for line in text[: text.index(summary.group(0)) + len(summary.group(0))].splitlines() if ABOUT_THE_API.search(line)]
    failing, total, logged_server, seconds, error = summary.groups()
    assert int(failing) == int(total) >= 16 and logged_server == server and int(seconds) == 30, summary.group(0)
    assert "Connection refused" in error or "NewConnectionError" in error, error
    names = re.findall(r"\] (.+?): list/watch failed: ", "\n".join(lines))
    assert len(names) == len(set(names)), names  # one line per informer, however often it tried
    # Every informer of the source, and the two of the status addresses (Pod, Node), once each,
    # and the summary: issue 61 counted 216 lines in 13 s before.
    assert len(lines) == len(names) + 1 <= int(total) + 3, lines
    print(f"{len(lines)} lines about the apiserver in the first {seconds} s ({total} informers of the source)")
