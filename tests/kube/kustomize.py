"""
A small kustomize renderer for the tests: what C{kubectl kustomize k8s/} would print, as dicts.

Why not C{kubectl}: building it from source for the test environment costs minutes and hundreds
of megabytes for one feature, while our base and its overlays use only three fields of a
Kustomization:

- C{resources}: files (one or more YAML documents) and directories holding a kustomization;
- C{patches}: strategic-merge patches, from C{path} or inline C{patch}, each applied to the
  object of the same kind and name (an explicit C{target} is not supported);
- C{apiVersion}/C{kind}.

Anything else in a Kustomization raises L{KustomizeError}, so a manifest change that needs a
real kustomize fails loudly here instead of rendering something different from C{kubectl}.
The strategic merge does what our patches need: maps merge key by key, lists of maps that all
have a C{name} merge by name, any other list is replaced, C{null} deletes a key.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "resources", "patches"})


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not do, or is inconsistent."""


def render(directory: Path) -> list[dict]:
    """The objects of the kustomization in C{directory}, in its resources' order."""
    directory = Path(directory)
    kustomization = _load_kustomization(directory)
    objects: list[dict] = []
    for entry in kustomization.get("resources") or []:
        objects.extend(_resource(directory / entry))
    for patch in kustomization.get("patches") or []:
        _apply(objects, _patch_body(directory, patch))
    return objects


def _load_kustomization(directory: Path) -> dict:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            document = yaml.safe_load(path.read_text()) or {}
            unknown = set(document) - SUPPORTED_FIELDS
            if unknown:
                raise KustomizeError(f"{path}: fields not supported by tests/kube/kustomize.py: {sorted(unknown)}")
            return document
    raise KustomizeError(f"{directory}: no kustomization file")


def _resource(path: Path) -> Iterator[dict]:
    if path.is_dir():
        yield from render(path)
        return
    for document in yaml.safe_load_all(path.read_text()):
        if document is None:
            continue
        if not isinstance(document, dict) or "kind" not in document:
            raise KustomizeError(f"{path}: a document that is not a Kubernetes object")
        yield document


def _patch_body(directory: Path, patch: dict) -> dict:
    if "target" in patch:
        raise KustomizeError("patches with a target are not supported: name the object in the patch")
    if "path" in patch:
        text = (directory / patch["path"]).read_text()
    elif "patch" in patch:
        text = patch["patch"]
    else:
        raise KustomizeError(f"a patch without path or patch: {patch!r}")
    body = yaml.safe_load(text)
    if not isinstance(body, dict) or "kind" not in body or "name" not in (body.get("metadata") or {}):
        raise KustomizeError(f"a patch must name its object (kind, metadata.name): {patch!r}")
    return body


def _apply(objects: list[dict], patch: dict) -> None:
    """Merge C{patch} into the one object with its kind, name (and namespace, when given)."""
    meta = patch["metadata"]
    matches = [
        index for index, obj in enumerate(objects)
        if obj["kind"] == patch["kind"]
        and obj["metadata"]["name"] == meta["name"]
        and meta.get("namespace") in (None, obj["metadata"].get("namespace"))
    ]
    if len(matches) != 1:
        raise KustomizeError(f"patch of {patch['kind']}/{meta['name']}: {len(matches)} objects match")
    objects[matches[0]] = merge(objects[matches[0]], patch)


def merge(base: Any, patch: Any) -> Any:
    """A strategic merge of C{patch} into a copy of C{base} (see the module docstring)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = merge(base.get(key), value)
        return merged
    if _named_list(base) and _named_list(patch):
        merged_list = [copy.deepcopy(item) for item in base]
        positions = {item["name"]: index for index, item in enumerate(merged_list)}
        for item in patch:
            index: Optional[int] = positions.get(item["name"])
            if index is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[index] = merge(merged_list[index], item)
        return merged_list
    return copy.deepcopy(patch)


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The one rendered object of C{kind} named C{name}."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise KeyError(f"{kind}/{name}: {len(found)} objects")
    return found[0]
