"""YAML as kubectl writes it, read safely and salvaged item by item when damaged."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

from whyjob.collector.ingest.base import Rejected

__all__ = ["AliasRefused", "KubeYamlLoader", "load_untrusted", "yaml_documents"]


class KubeYamlLoader(yaml.CSafeLoader):
    """The C safe loader without implicit timestamps: times stay strings, as in JSON."""


KubeYamlLoader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


class AliasRefused(yaml.YAMLError):
    """An imported document used a YAML alias: refused, since a few lines of nested aliases
    expand to gigabytes (a "billion laughs") and kubectl never writes one."""

    def __init__(self) -> None:
        super().__init__("YAML aliases are refused in imported documents")
        self.problem = "YAML aliases are refused in imported documents (alias bomb guard)"


# Could this text hold an anchor or an alias? Cheap, and false alarms only cost a second look.
_ALIAS_HINT = re.compile(r"(?:^|[\s\[{,:-])[&*][^\s\[\]{},]")


def load_untrusted(text: str) -> Any:
    """One YAML document, safely, with times kept as strings and aliases refused."""
    if _ALIAS_HINT.search(text) and any(
        isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.CSafeLoader)
    ):
        raise AliasRefused
    return yaml.load(text, Loader=KubeYamlLoader)


_SEPARATOR = re.compile(r"^---(?:\s.*)?$", re.MULTILINE)
# A top-level List item in kubectl's YAML: "- apiVersion: v1" at column 0 under "items:".
_ITEM_START = re.compile(r"^- ", re.MULTILINE)
_ITEMS_KEY = re.compile(r"^items:\s*$", re.MULTILINE)


def _problem(exc: yaml.YAMLError) -> tuple[int | None, str]:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (mark.line + 1 if mark is not None else None), f"invalid YAML: {problem}"


def yaml_documents(text: str, limit: int = 1 << 62) -> Iterator[tuple[int, Any | Rejected]]:
    """(first line, document) for each `---` separated document; damage comes as Rejected,
    and so does a document of more than `limit` characters (never parsed)."""
    starts = [0, *(m.end() + 1 for m in _SEPARATOR.finditer(text))]
    for begin, end in zip(starts, [*starts[1:], len(text) + 1], strict=True):
        chunk = text[begin:end]
        if not chunk.strip() or chunk.strip() == "---":
            continue
        first_line = text.count("\n", 0, begin) + 1
        if len(chunk) > limit:
            reason = f"YAML document of {len(chunk):,} characters is over ingest.max_document"
            yield first_line, Rejected(first_line, reason, chunk[:4096].encode())
            continue
        try:
            doc = load_untrusted(chunk)
        except yaml.YAMLError as exc:
            yield from _salvage(chunk, first_line, exc)
            continue
        yield from _check_trailer(doc, chunk, first_line)


def _check_trailer(doc: Any, chunk: str, first_line: int) -> Iterator[tuple[int, Any]]:
    """kubectl writes `kind: List` after the items: a List without it was cut short, and its
    last item may be incomplete even though what is left still parses."""
    if not (isinstance(doc, dict) and isinstance(doc.get("items"), list) and "kind" not in doc):
        yield first_line, doc
        return
    items = doc["items"]
    starts = [m.start() for m in _ITEM_START.finditer(chunk)]
    if items:
        line = first_line + (chunk.count("\n", 0, starts[-1]) if starts else 0)
        body = chunk[starts[-1] :] if starts else ""
        yield (
            line,
            Rejected(
                line,
                "truncated YAML document (the List has no kind/metadata trailer, so its last "
                "item may be cut short)",
                body.encode()[:65536],
            ),
        )
    yield first_line, {**doc, "kind": "List", "items": items[:-1]}


def _salvage(chunk: str, first_line: int, exc: yaml.YAMLError) -> Iterator[tuple[int, Any]]:
    """Parse a damaged List's items one at a time; report the ones that do not parse."""
    bad_line, reason = _problem(exc)
    items_key = _ITEMS_KEY.search(chunk)
    if items_key is None:
        at = first_line + (bad_line - 1 if bad_line else 0)
        yield at, Rejected(at, reason, chunk.encode()[:65536])
        return
    starts = [m.start() for m in _ITEM_START.finditer(chunk, items_key.end())]
    # The List's own trailer (kind: List, metadata) follows the last item at column 0.
    trailer = re.compile(r"^[A-Za-z]", re.MULTILINE)
    items: list[Any] = []
    for number, start in enumerate(starts):
        stop = starts[number + 1] if number + 1 < len(starts) else len(chunk)
        if found := trailer.search(chunk, start + 2, stop):
            stop = found.start()
        piece = chunk[start:stop]
        line = first_line + chunk.count("\n", 0, start)
        try:
            parsed = load_untrusted(piece)
        except yaml.YAMLError as item_exc:
            _, item_reason = _problem(item_exc)
            truncated = stop == len(chunk) and bad_line is not None
            yield (
                line,
                Rejected(
                    line,
                    "truncated YAML document (the file ends inside this item)"
                    if truncated
                    else item_reason,
                    piece.encode()[:65536],
                ),
            )
            continue
        if isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
            items.append(parsed[0])
    if items:
        yield first_line, {"apiVersion": "v1", "kind": "List", "items": items}
