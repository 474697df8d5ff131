"""Which format a file is in, and its parsed items: content decides, not file names.

JSON documents are routed by their shape (a Kubernetes List, `{"Activities": ...}`, an
EventBridge envelope, ...), YAML by its first keys, text by its first lines. The kubelet log
path is the one name that matters, because it names the pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from whyjob.collector.ingest import formats, podlogs
from whyjob.collector.ingest.base import (
    Context,
    Item,
    Rejected,
    guarded,
    resilient_lines,
)
from whyjob.collector.ingest.jsondocs import Damage, iter_json_docs, looks_like_json_lines
from whyjob.collector.ingest.yamlload import yaml_documents

__all__ = ["cut_line", "decode_lines", "read"]

_SNIFF_LINES = 20


def decode_lines(
    data: bytes, line_limit: int = 1 << 62
) -> tuple[list[tuple[int, str]], list[Rejected], int]:
    """Lines with their numbers, the lines rejected, and how many were cut.

    A line that is not UTF-8 or holds a NUL byte is rejected alone; the rest are kept. A line
    longer than `line_limit` characters is cut there and marked, so one runaway line (a
    200 MB progress bar) costs neither minutes of pattern matching nor the index's space.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raws = data.split(b"\n")
    else:
        if len(text) <= line_limit and "\x00" not in text:
            return (
                [
                    (number, line[:-1] if line.endswith("\r") else line)
                    for number, line in enumerate(text.lstrip("\ufeff").split("\n"), start=1)
                ],
                [],
                0,
            )
        raws = text.lstrip("\ufeff").encode("utf-8").split(b"\n")
    lines: list[tuple[int, str]] = []
    bad: list[Rejected] = []
    cut = 0
    for number, raw in enumerate(raws, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append(
                Rejected(
                    number,
                    f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                    raw[:65536],
                )
            )
            continue
        if "\x00" in line:
            bad.append(
                Rejected(number, f"NUL byte at column {line.index(chr(0)) + 1}", raw[:65536])
            )
            continue
        line = line[:-1] if line.endswith("\r") else line
        if len(line) > line_limit:
            cut += 1
            line = cut_line(line, line_limit)
        lines.append((number, line))
    return lines, bad, cut


def cut_line(line: str, limit: int) -> str:
    """A line cut at `limit` characters, marked so a reader sees it was cut and by how much."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]} [whyjob: line cut, {len(line) - limit:,} more characters]"


# dmesg lines start with "[" too: "[12345.678901] ..." and "[Sun Nov 22 15:03:43 2026] ...".
_DMESG_START = re.compile(rb"^\[\s*\d+\.\d+\]|^\[[A-Z][a-z]{2} [A-Z][a-z]{2} ")


def _looks_like_json(data: bytes) -> bool:
    """The file starts like JSON, or most of its first lines do (JSON Lines with a torn line
    first)."""
    head = data[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"[") and not _DMESG_START.match(head):
        return True
    return looks_like_json_lines(data[:8192].decode("utf-8", "replace"))


def _looks_like_yaml(lines: list[tuple[int, str]]) -> bool:
    for _, line in lines[:_SNIFF_LINES]:
        if not line.strip() or line.startswith("#"):
            continue
        return line.startswith(("apiVersion:", "kind:", "---", "items:"))
    return False


def read(ctx: Context, data: bytes) -> tuple[str, Iterator[Item] | None]:
    """The format name and the parsed items, or (reason, None) when nothing reads it."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 (PowerShell's `>`): read as UTF-8
        data = data.decode("utf-16", "replace").encode("utf-8")
    forced = ctx.options.fmt
    if (forced is None or forced in _JSON_NAMES | {formats.DOCKER_LOG}) and _looks_like_json(data):
        return _route_json(ctx, data, forced)
    lines, bad, ctx.cut_lines = decode_lines(data, ctx.options.limits.line_bytes)
    if forced in _JSON_NAMES:
        return f"not {forced}: the file is not JSON", None
    if (forced is None and _looks_like_yaml(lines)) or forced == "k8s":
        return "k8s", _yaml_items(ctx, data, bad)
    sniff = [line for _, line in lines if line.strip()][:_SNIFF_LINES]
    if forced is None and not sniff and not bad:
        return "empty file", None
    for text_format in (*formats.TEXT_FORMATS, formats.PLAIN_LOG):
        if text_format is formats.PLAIN_LOG:
            claimed = forced == text_format.name or (
                forced is None and (ctx.options.pod is not None or "pod" in ctx.path_hints)
            )
        else:
            claimed = forced == text_format.name or (forced is None and text_format.matches(sniff))
        if claimed:
            return text_format.name, _chain(bad, resilient_lines(ctx, text_format.parse, lines))
    if forced is not None:
        return f"unknown format {forced!r} (see `whyjob ingest --help` for the list)", None
    return (
        "not a format whyjob recognises (attach a plain log to a pod with --pod, "
        "or force a format with --format)",
        None,
    )


def _route_json(ctx: Context, data: bytes, forced: str | None) -> tuple[str, Iterator[Item] | None]:
    docs = iter_json_docs(data, ctx.options.limits.document_bytes)
    first: Any = None
    found = False
    pending: list[Any] = []
    for doc in docs:
        pending.append(doc)
        if not isinstance(doc, Damage):
            first, found = doc.value, True
            break
    if not found:
        if not pending:
            return "empty file", None
        # Nothing parsed at all: report the damage as the file's only records.
        return "json", _damage_items(pending)
    stream = _chain_docs(pending, docs)
    if forced == formats.DOCKER_LOG or (forced is None and podlogs.looks_like_docker_json(first)):
        return formats.DOCKER_LOG, _docker_items(ctx, stream)
    for json_format in formats.JSON_FORMATS:
        if forced == json_format.name or (forced is None and json_format.matches(first)):
            return json_format.name, _json_items(ctx, json_format, stream)
    return "JSON, but not an export whyjob recognises", None


def _json_items(
    ctx: Context, json_format: formats.JsonFormat, stream: Iterable[Any]
) -> Iterator[Item]:
    for doc in stream:
        if isinstance(doc, Damage):
            yield Rejected(doc.line, doc.reason, doc.body)
        elif json_format.matches(doc.value):
            yield from guarded(json_format.parse(ctx, doc.value, doc.line), doc.line, doc.value)
        else:
            yield Rejected(doc.line, f"document is not {json_format.description}")


def _docker_items(ctx: Context, stream: Iterable[Any]) -> Iterator[Item]:
    docs: list[tuple[int, Any]] = []
    for doc in stream:
        if isinstance(doc, Damage):
            yield Rejected(doc.line, doc.reason, doc.body)
        else:
            docs.append((doc.line, doc.value))
    yield from resilient_lines(ctx, podlogs.parse_docker_json, docs)


def _yaml_items(ctx: Context, data: bytes, bad: list[Rejected]) -> Iterator[Item]:
    yield from bad
    if bad:
        # Undecodable bytes were rejected line by line; parse what is left.
        data = b"\n".join(
            b"" if number in {r.line for r in bad} else raw
            for number, raw in enumerate(data.split(b"\n"), start=1)
        )
    limit = ctx.options.limits.document_bytes
    for line, doc in yaml_documents(data.decode("utf-8", "replace"), limit):
        if isinstance(doc, Rejected):
            yield doc
        elif formats.JSON_FORMATS[0].matches(doc):
            yield from guarded(formats.parse_k8s(ctx, doc, line), line, doc)
        elif doc is not None:
            yield Rejected(line, "YAML document is not a Kubernetes object or List")


_JSON_NAMES = frozenset(f.name for f in formats.JSON_FORMATS)


def _chain(first: Iterable[Item], second: Iterable[Item]) -> Iterator[Item]:
    yield from first
    yield from second


def _chain_docs(pending: list[Any], rest: Iterable[Any]) -> Iterator[Any]:
    yield from pending
    yield from rest


def _damage_items(damages: list[Any]) -> Iterator[Item]:
    for damage in damages:
        yield Rejected(damage.line, damage.reason, damage.body)
