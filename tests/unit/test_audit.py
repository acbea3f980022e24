"""
C{twingress audit} over manifests, in memory: ingress-nginx's docs/examples corpus and
examples/nginx-migration with a ConfigMap of every documented key (tests/audit_corpus.py), every
annotation and key with a fate, the fates the table's (a closed route is denied, an unread key
reported), the JSON valid against docs/audit.schema.json, Markdown and HTML produced and readable,
the take-over preset's options, and docs/migration.md's report current.
"""

from __future__ import annotations

import html.parser
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.python import usage

from ingress.audit.command import AuditOptions, snapshot
from ingress.audit.render import FORMATS, as_html, as_markdown
from ingress.audit.report import audit
from ingress.options import build_arguments
from ingress.tap import Options
from tests.audit_corpus import CONTROLLER_CONFIGMAP, MIGRATION, corpus, documented_keys, our_annotations, write_corpus
from tests.audit_schema import validate
from tests.support import ROOT

# examples/nginx-migration/run.sh's command line, as docs/migration.md shows its report
MIGRATION_LINE = ["--manifests", "examples/nginx-migration", "--nginx-configmap", "ingress-nginx/ingress-nginx-controller"]


def report_of(*arguments: str) -> dict[str, Any]:
    options = AuditOptions()
    options.parseOptions(list(arguments))
    state, source = snapshot(options)
    return audit(state, build_arguments(options), source)


@pytest.fixture(scope="module")
def corpus_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = write_corpus(tmp_path_factory.mktemp("corpus"))
    return report_of("--manifests", str(directory), "--take-over-ingress-nginx", "true")


def test_every_annotation_and_every_documented_key_has_a_fate(corpus_report: dict[str, Any]) -> None:
    ingresses = {f"{o['metadata'].get('namespace', 'default')}/{o['metadata']['name']}": o for o in corpus() if o["kind"] == "Ingress"}
    shown = {i["object"]: i for i in corpus_report["ingresses"]}
    assert set(shown) == set(ingresses)
    for name, obj in ingresses.items():
        assert [a["key"] for a in shown[name]["annotations"]] == our_annotations(obj), name
    keys = [k["key"] for k in corpus_report["configmap"]["keys"]]
    assert sorted(keys) == sorted(key for key, _ in documented_keys())
    assert corpus_report["configmap"]["object"] == "/".join(CONTROLLER_CONFIGMAP)
    assert validate(corpus_report) == []


def test_the_summary_counts_what_the_report_lists(corpus_report: dict[str, Any]) -> None:
    summary = corpus_report["summary"]
    fates = [a["fate"] for i in corpus_report["ingresses"] for a in i["annotations"]]
    assert summary["annotations"] == {fate: fates.count(fate) for fate in ("applied", "denied", "reported")}
    keys = [k["fate"] for k in corpus_report["configmap"]["keys"]]
    assert summary["configmap"] == {fate: keys.count(fate) for fate in ("applied", "denied", "reported")}
    served = [i["served"] for i in corpus_report["ingresses"]]
    assert summary["ingresses"] == {"served": served.count(True), "skipped": served.count(False)}
    order = [entry["fate"] for entry in summary["attention"]]
    assert order == sorted(order, key=("denied", "reported").index), "denied before reported"
    print("docs/examples corpus:", json.dumps({k: summary[k] for k in ("ingresses", "annotations", "configmap", "differences")}))


def test_a_denied_key_is_a_closed_route_and_a_reported_one_is_not(corpus_report: dict[str, Any]) -> None:
    """The fates are the table's: a route that answers an error has a denied key behind it (the ConfigMap's or its own)."""
    config_denied = any(k["fate"] == "denied" for k in corpus_report["configmap"]["keys"])
    for ingress in corpus_report["ingresses"]:
        closed = [r for r in ingress["routes"] if "denied" in r]
        own = [a for a in ingress["annotations"] if a["fate"] == "denied"]
        if closed:
            assert own or config_denied, ingress
        if own and ingress["served"]:
            assert closed or any("not served" in a["message"] for a in own), ingress


def test_the_every_key_configmap_at_its_defaults(corpus_report: dict[str, Any]) -> None:
    """ingress-nginx's defaults are harmless: a key set to its documented default closes nothing, except where twingress must refuse."""
    fates = {k["key"]: k for k in corpus_report["configmap"]["keys"]}
    assert fates["proxy-body-size"]["fate"] == "applied"
    assert fates["enable-brotli"]["fate"] == "reported"
    denied = sorted(key for key, fate in fates.items() if fate["fate"] == "denied")
    print("denied at their documented defaults:", denied)
    for key in denied:
        assert fates[key]["message"], key


def test_snippets_show_what_they_held_and_why_refused(tmp_path: Path) -> None:
    """configuration-snippet with a guard (deny) closes its route, with the snippet shown; one that sets a header field is reported."""
    documents = [
        _service("web"),
        _ingress("guarded", "guarded.example", {"nginx.ingress.kubernetes.io/configuration-snippet": "deny all;"}),
        _ingress("shaped", "shaped.example", {"nginx.ingress.kubernetes.io/configuration-snippet": 'more_set_headers "X-A: b";'}),
        _ingress("both", "both.example", {"twingress.io/ssl-redirect": "false", "nginx.ingress.kubernetes.io/ssl-redirect": "true"}),
    ]
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(documents))
    report = report_of("--manifests", str(tmp_path))
    shown = {i["object"]: i for i in report["ingresses"]}
    (guarded,) = shown["default/guarded"]["annotations"]
    assert (guarded["fate"], guarded["snippet"]) == ("denied", "deny all;") and "503" in guarded["message"]
    assert shown["default/guarded"]["routes"][0]["denied"]["status"] == 503
    (shaped,) = shown["default/shaped"]["annotations"]
    assert (shaped["fate"], shaped["snippet"]) == ("reported", 'more_set_headers "X-A: b";')
    assert "denied" not in shown["default/shaped"]["routes"][0]
    fates = {a["key"]: a["fate"] for a in shown["default/both"]["annotations"]}
    assert fates == {"twingress.io/ssl-redirect": "applied", "nginx.ingress.kubernetes.io/ssl-redirect": "reported"}
    ignored = report_of("--manifests", str(tmp_path), "--nginx-annotations", "false")
    assert {a["fate"] for i in ignored["ingresses"] for a in i["annotations"] if a["key"].startswith("nginx.")} == {"reported"}
    assert validate(report) == [] and validate(ignored) == []


def test_a_trailing_slash_path_is_a_difference_and_secrets_stay_unprinted(tmp_path: Path) -> None:
    """
    A Prefix path /docs/: ingress-nginx answers /docs with a 301 to /docs/ (its location block for the
    path without the slash); shown under differences.  An auth-secret is read, its data never printed.
    """
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "users", "namespace": "default"},
        "stringData": {"auth": "alice:$apr1$Zm9v$SECRETHASHSECRETHASH"},
    }
    docs = _ingress("docs", "docs.example", {"nginx.ingress.kubernetes.io/auth-type": "basic", "nginx.ingress.kubernetes.io/auth-secret": "users"})
    docs["spec"]["rules"][0]["http"]["paths"][0]["path"] = "/docs/"
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all([_service("web"), secret, docs]))
    report = report_of("--manifests", str(tmp_path))
    assert report["differences"] == [
        {"object": "default/docs", "behaviour": "trailing-slash-redirect", "message": "docs.example /docs: ingress-nginx answers 301 to /docs/; twingress: matched by the Prefix rule"}
    ]
    assert {a["fate"] for a in report["ingresses"][0]["annotations"]} == {"applied"}
    for render in FORMATS.values():
        assert "SECRETHASH" not in render(report)


def test_the_migration_example_in_every_format() -> None:
    """Markdown and HTML are produced and parse: every object named, no script."""
    report = report_of(*MIGRATION_LINE)
    assert validate(report) == []
    page = _Page()
    page.feed(as_html(report))
    assert page.tags >= {"html", "table", "h1"} and "script" not in page.tags
    markdown = as_markdown(report)
    names = [i["object"] for i in report["ingresses"]] + [report["configmap"]["object"]]
    for name in names:
        assert name in page.text and name in markdown, name
    assert all(line.count("|") >= 4 for line in markdown.splitlines() if line.startswith("|"))
    for render in FORMATS.values():
        assert render(report)


def test_docs_migration_shows_the_report_as_the_command_makes_it() -> None:
    """docs/migration.md's report is `twingress audit` on examples/nginx-migration, pasted as produced."""
    text = (ROOT / "docs" / "migration.md").read_text()
    produced = FORMATS["text"](report_of(*MIGRATION_LINE))
    assert produced in text, "regenerate docs/migration.md's report: " + " ".join(["twingress", "audit", *MIGRATION_LINE])


def test_docs_migration_shows_the_corpus_counts(corpus_report: dict[str, Any]) -> None:
    """docs/migration.md's audit of the docs/examples corpus: the report's first lines, as produced."""
    head = "\n".join(FORMATS["text"](corpus_report).splitlines()[:6]) + "\n"
    assert head in (ROOT / "docs" / "migration.md").read_text(), "update docs/migration.md's corpus counts:\n" + head


def test_gateway_api_routes_have_their_fates(tmp_path: Path) -> None:
    """examples/gateway: each HTTPRoute accepted by the Gateway of ours is served; one whose parent is no Gateway is not."""
    for path in (ROOT / "examples" / "gateway").glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    orphan = {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "orphan", "namespace": "site"},
        "spec": {"parentRefs": [{"name": "nowhere", "namespace": "infra"}], "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
    }
    (tmp_path / "orphan.yaml").write_text(yaml.safe_dump(orphan))
    report = report_of("--manifests", str(tmp_path))
    assert [(r["kind"], r["object"], r["served"]) for r in report["gatewayRoutes"]] == [
        ("HTTPRoute", "site/old-name", True), ("HTTPRoute", "site/orphan", False), ("HTTPRoute", "site/site", True), ("HTTPRoute", "store/store", True),
    ]
    assert all(r["reason"] == "served: accepted by infra/shared" for r in report["gatewayRoutes"] if r["served"])
    (orphan_shown,) = [r for r in report["gatewayRoutes"] if not r["served"]]
    assert orphan_shown["reason"].startswith("not served: ")
    print("an HTTPRoute without a Gateway:", orphan_shown["reason"])
    assert validate(report) == []


def test_a_schema_break_is_found() -> None:
    """The validator itself: a report missing a field, or with an unknown fate, fails."""
    report = report_of(*MIGRATION_LINE)
    broken = json.loads(json.dumps(report))
    del broken["summary"]["annotations"]
    broken["ingresses"][0]["annotations"].append({"key": "x", "fate": "ignored", "message": ""})
    found = validate(broken)
    assert any("'annotations' is missing" in e for e in found) and any("'ignored' is not one of" in e for e in found)


def test_the_take_over_preset_sets_what_the_line_does_not(tmp_path: Path) -> None:
    """--take-over-ingress-nginx true: controller, class, ConfigMap and no status writes; an option given too wins."""
    for parser in (Options, AuditOptions):
        options = parser()
        options.parseOptions(["--manifests", str(MIGRATION), "--take-over-ingress-nginx", "true", "--ingress-class", "internal"])
        assert (options["controller-name"], options["ingress-class"], options["nginx-configmap-key"]) == (
            "k8s.io/ingress-nginx", "internal", ("ingress-nginx", "ingress-nginx-controller"),
        )
        with pytest.raises(usage.UsageError, match="--take-over-ingress-nginx must be true or false"):
            parser().parseOptions(["--manifests", str(MIGRATION), "--take-over-ingress-nginx", "yes"])
    proxy = Options()
    proxy.parseOptions(["--manifests", str(MIGRATION), "--take-over-ingress-nginx", "true"])
    assert proxy["update-status"] == "false" and proxy["controllers"].update_status is False
    assert (proxy["controllers"].controller_name, proxy["controllers"].generator.class_name) == ("k8s.io/ingress-nginx", "nginx")
    given = Options()
    given.parseOptions(["--manifests", str(MIGRATION), "--take-over-ingress-nginx", "true", "--update-status", "true", "--nginx-configmap", "a/b"])
    assert (given["update-status"], given["nginx-configmap-key"]) == ("true", ("a", "b"))
    plain = Options()
    plain.parseOptions(["--manifests", str(MIGRATION)])
    assert (plain["ingress-class"], plain["nginx-configmap-key"], plain["update-status"]) == ("twingress", None, "true")


def test_a_thousand_ingresses(tmp_path: Path) -> None:
    """1,000 Ingresses with annotations audited; the time is reported, not asserted."""
    documents = [_service("web")] + [
        _ingress(f"app-{n}", f"app-{n}.example", {"nginx.ingress.kubernetes.io/proxy-body-size": "8m", "nginx.ingress.kubernetes.io/enable-cors": "true"})
        for n in range(1000)
    ]
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(documents))
    started = time.perf_counter()
    report = report_of("--manifests", str(tmp_path))
    text = FORMATS["json"](report)
    took = time.perf_counter() - started
    print(f"1,000 Ingresses audited (read, built, reported as JSON) in {took:.2f} s")
    assert report["summary"]["ingresses"] == {"served": 1000, "skipped": 0}
    assert report["summary"]["annotations"]["applied"] == 2000 and json.loads(text) == report


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": {"ports": [{"port": 80}]}}


def _ingress(name: str, host: str, annotations: dict[str, str]) -> dict[str, Any]:
    path = {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"ingressClassName": "twingress", "rules": [{"host": host, "http": {"paths": [path]}}]},
    }


class _Page(html.parser.HTMLParser):
    """The tags and the text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text = ""

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.add(tag)

    def handle_data(self, data: str) -> None:
        self.text += data
