"""
docs/ against the code: every option of C{twistd ingress}, every annotation key and every key of
ingress-nginx's controller ConfigMap is documented once, with what the code does with it, and a
name the docs use exists.  (The metrics are checked against a running twingress's /metrics, in
tests/proxy/test_docs_metrics.py.)

The code's lists are the source: the Options class (L{ingress.tap.Options}), the annotation key
tables (L{ingress.routing.annotations.keys}), the Service annotations of the Ingress generator
(L{ingress.controllers.generated}) and the ConfigMap's (L{ingress.routing.config_keys} and the
readers of L{ingress.routing.nginx_config}).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from twisted.python import usage
from twisted.scripts.twistd import ServerOptions

from ingress.audit.command import AuditOptions
from ingress.controllers import generated
from ingress.model import CONTROLLER_NAME
from ingress.model.gateway import GATEWAY_CONTROLLER_NAME
from ingress.routing import config_keys, config_notes, nginx_config
from ingress.routing.annotations import keys
from ingress.tap import Options
from tests.docs_tables import DOCS, doc_files, prose_and_code, spans, table_rows

CONFIGURATION = DOCS / "configuration.md"
ANNOTATIONS = DOCS / "annotations.md"
MIGRATION = DOCS / "migration.md"


def _long_options(options: usage.Options) -> set[str]:
    """The long option names of a usage.Options instance (its C{longOpt}, "=" dropped)."""
    return {name.rstrip("=") for name in options.longOpt}


def _once(names: Iterable[str]) -> list[str]:
    """The names that appear more than once."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


# -- options


def _option_rows() -> list[list[str]]:
    return table_rows(CONFIGURATION, "| option | default |")


def _documented_options() -> list[str]:
    found = []
    for row in _option_rows():
        (name,) = spans(row[0])  # one option per row
        assert name.startswith("--"), row
        found.append(name[2:])
    return found


def test_every_option_is_documented_once() -> None:
    documented = _documented_options()
    assert _once(documented) == []
    assert sorted(_long_options(Options()) - set(documented)) == [], "options missing from docs/configuration.md"
    assert sorted(set(documented) - _long_options(Options())) == [], "docs/configuration.md names options that do not exist"


def _shown(default: object) -> str:
    """A default as the docs write it: 1 for 1.0, '' for the empty string."""
    if isinstance(default, float):
        return f"{default:g}"
    return "''" if default == "" else str(default)


def test_every_documented_default_is_the_code_s() -> None:
    defaults = {parameter[0]: parameter[2] for parameter in Options.optParameters}
    wrong = []
    for row in _option_rows():
        name = spans(row[0])[0][2:]
        if name not in defaults:
            continue  # a flag, --help, --version: no default
        default = defaults[name]
        if default is None:
            assert not re.fullmatch(r"`[^`]*`", row[1]), f"--{name} has no default, the docs show one: {row[1]}"
            continue
        if row[1] != f"`{_shown(default)}`":
            wrong.append((name, row[1], _shown(default)))
    assert wrong == []


def _help_defaults() -> dict[str, str | None]:
    """What --help shows at the end of each option's text, "[default: ...]", by option (None: no default shown)."""
    shown: dict[str, str | None] = {}
    for line in Options().getUsage(width=10_000).splitlines():  # what twistd ingress --help prints, one line per option
        match = re.match(r"\s+--([a-z0-9-]+)=?\s+(.*)$", line)
        if match:
            default = re.search(r"\[default: (.*)\]$", match.group(2))
            shown[match.group(1)] = default.group(1) if default else None
    return shown


def _words(text: str) -> str:
    """Prose without the quoting that differs between --help and Markdown (`--https`, 'default')."""
    return text.replace("`", "").replace("'", "")


def test_help_shows_every_default_as_the_docs_do() -> None:
    """
    --help and the option tables agree on every default: the same value where the docs give one
    (`1`, not 1.0; `''`, not nothing), and the docs' words where a default is described.
    """
    shown = _help_defaults()
    assert sorted(_long_options(Options()) - set(shown)) == [], "options --help does not show"
    wrong = []
    for row in _option_rows():
        name = spans(row[0])[0][2:]
        value = re.fullmatch(r"`([^`]*)`", row[1])
        if value is not None:
            if shown[name] != value.group(1):
                wrong.append((name, row[1], shown[name]))
        elif shown[name] is not None and _words(shown[name]) not in _words(row[1]):
            wrong.append((name, row[1], shown[name]))
    assert wrong == []


def _named_options() -> Iterable[tuple[str, str]]:
    """(page, option) of every option the docs use: code spans that start with one, and twistd ingress command lines."""
    for path in doc_files():
        prose, code = prose_and_code(path)
        for span in spans(prose):
            match = re.match(r"--([a-z0-9][a-z0-9-]*)", span)
            if match:
                yield path.name, match.group(1)
        for line in code:
            if "twistd" in line and " ingress" in line:
                arguments = line.split("#", 1)[0].split(" ingress", 1)[1]
                yield from ((path.name, name) for name in re.findall(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)", arguments))


def test_every_option_the_docs_name_exists() -> None:
    """A span like `--workers auto` names an option of twistd ingress (or of twistd itself: --pidfile, --logfile; or of twingress audit: --format)."""
    known = _long_options(Options()) | _long_options(ServerOptions()) | _long_options(AuditOptions())
    unknown = sorted({(page, name) for page, name in _named_options() if name not in known})
    assert unknown == []


# -- annotations

STATUSES = {
    "supported": {name for name, key in keys.KEYS.items() if key.nginx},
    "supported, `twingress.io/` only": {name for name, key in keys.KEYS.items() if not key.nginx},
    "refused, closes (503)": set(keys.ACCESS_GUARDS),
    "refused, never executed": set(keys.SNIPPETS),
    "refused, ignored": set(keys.HARMLESS),
}


def _check_classes(rows: list[list[str]], classes: dict[str, set[str]]) -> list[str]:
    """
    Rows of (keys, class) against the code's classes: each key in one row, each class's keys exactly
    the code's.  Returns every key documented.
    """
    documented: dict[str, set[str]] = {kind: set() for kind in classes}
    every: list[str] = []
    for row in rows:
        assert row[1] in classes, f"unknown class {row[1]!r}"
        names = spans(row[0])
        assert names and all(re.fullmatch(r"[a-z0-9-]+", name) for name in names), row[0]
        documented[row[1]].update(names)
        every.extend(names)
    assert _once(every) == []
    for kind, expected in classes.items():
        assert sorted(expected - documented[kind]) == [], f"not documented as {kind!r}"
        assert sorted(documented[kind] - expected) == [], f"documented as {kind!r}, which the code does not say"
    return every


def test_every_annotation_is_documented_once_with_its_status() -> None:
    _check_classes(table_rows(ANNOTATIONS, "| annotation (either prefix) | status |"), STATUSES)


def test_every_service_annotation_is_documented_once() -> None:
    rows = table_rows(ANNOTATIONS, "| annotation | meaning | default |")
    documented = [spans(row[0])[0] for row in rows]
    assert _once(documented) == []
    assert sorted(documented) == sorted({generated.ENABLE, generated.HOST, generated.PATH, generated.PORT, generated.TLS_SECRET})


def test_every_annotation_the_docs_name_exists() -> None:
    """Every C{twingress.io/KEY} and C{nginx.ingress.kubernetes.io/KEY} in docs/ and the README is a key twingress knows."""
    known = set(keys.KEYS) | keys.ACCESS_GUARDS | keys.SNIPPETS | set(keys.HARMLESS)
    not_annotations = {name.split("/", 1)[1] for name in (CONTROLLER_NAME, GATEWAY_CONTROLLER_NAME)} | {"v1alpha1"}
    unknown = set()
    for path in doc_files():
        for prefix, name in re.findall(r"(?<![\w.-])(nginx\.ingress\.kubernetes\.io|twingress\.io)/([a-z0-9][a-z0-9-]*)", path.read_text()):
            if name not in known and not (prefix == "twingress.io" and name in not_annotations):
                unknown.add((path.name, f"{prefix}/{name}"))
    assert sorted(unknown) == []


# -- the ingress-nginx ConfigMap

CLASSES = {
    "read": set(nginx_config._READERS),
    "applied or reported": set(config_notes.NOTES),
    "command line": set(nginx_config._ON_THE_COMMAND_LINE),
    "enforced": set(config_keys.ENFORCED_GUARDS),
    "refused-and-denied": set(config_keys.REFUSED_GUARDS),
    "refused; denied unless harmless": set(config_keys.SNIPPETS),
    "refused-harmless": set(config_keys.HARMLESS),
}


def test_every_configmap_key_is_documented_once_in_its_class() -> None:
    every = _check_classes(table_rows(MIGRATION, "| ConfigMap key | class |"), CLASSES)
    assert sorted((nginx_config.INGRESS_NGINX_KEYS | config_keys.CONFIG_GO_KEYS) - set(every)) == []


# -- metrics (the tables against /metrics: tests/proxy/test_docs_metrics.py)


def test_every_metric_the_docs_name_is_in_the_metric_tables() -> None:
    """
    A metric named anywhere in docs/ or the README is a row of docs/observability.md's tables (which
    the /metrics test holds to what is registered): its name, its family name without C{_total}, or
    with a C{*} the prefix of some.
    """
    documented = {spans(row[0])[0] for row in table_rows(DOCS / "observability.md", "| metric | type |")}
    unknown = set()
    for path in doc_files():
        for name, star in re.findall(r"\b((?:twingress|nginx_ingress_controller)_[a-z0-9_]*)(\*?)", path.read_text()):
            if star:
                known = any(metric.startswith(name) for metric in documented)
            else:
                known = name in documented or f"{name}_total" in documented
            if not known:
                unknown.add((path.name, name + star))
    assert sorted(unknown) == []


# -- the pages


def test_the_readme_maps_every_page() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    unmapped = sorted(page.name for page in DOCS.glob("*.md") if f"(docs/{page.name})" not in readme)
    assert unmapped == []


def test_every_relative_link_leads_to_a_file() -> None:
    """Links between the pages (and to the tree) survive moves: a link to a file that is not there fails."""
    broken = []
    for path in doc_files():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" not in target and not (path.parent / target).exists():
                broken.append((path.name, target))
    assert broken == []
