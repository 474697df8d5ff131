"""JSON documents out of a file, keeping every good record of a bad file.

The fast path parses the whole file with orjson. When that fails the file is walked with the
stdlib decoder, which reports positions: concatenated documents (`kubectl get -w -o json`) and
JSON Lines (`journalctl -o json`) are split into documents, and a truncated or corrupt list is
salvaged element by element, so everything before the damage is still imported and the damage
itself is reported with its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Damage", "Doc", "iter_json_docs", "looks_like_json_lines"]

_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# Lone surrogates stand for undecodable bytes (errors="surrogateescape").
_SURROGATE = re.compile("[\udc80-\udcff]")
# The next line that starts a new top-level document, for resynchronising after damage.
_NEXT_DOC = re.compile(r"\n(?=[{\[])")


@dataclass(slots=True)
class Doc:
    """A parsed document and the line it starts on. `partial` when salvaged from damage."""

    value: Any
    line: int
    partial: bool = False


@dataclass(slots=True)
class Damage:
    """Bytes that could not be parsed: the line they start on, why, and the bytes themselves."""

    line: int
    reason: str
    body: bytes


_TOO_DEEP = "nested too deeply (over 1024 levels)"


def _raw_decode(text: str, pos: int) -> tuple[Any, int]:
    """The stdlib decoder, with nesting too deep for it reported as damage like any other."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        # orjson stops at 1024 levels; the stdlib decoder runs out of stack near there too.
        raise json.JSONDecodeError(_TOO_DEEP, text, pos) from None


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _skip_ws(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def iter_json_docs(data: bytes, limit: int = 1 << 62) -> Iterator[Doc | Damage]:
    """Every JSON document in `data`, in order, with damage reported in place.

    A large pretty-printed Kubernetes List comes out one item at a time (each its own
    document, with its line), so a 2 GB export is never a 2 GB object tree at once. Any
    other document longer than `limit` bytes is reported, not parsed.
    """
    if len(data) >= _STREAM_MIN_BYTES and (items := _list_items(data, limit)) is not None:
        yield from items
        return
    if len(data) > limit:
        text = data.decode("utf-8", "surrogateescape")
        if looks_like_json_lines(text):  # each line is a document, bounded on its own
            yield from _json_lines(text, limit)
        else:
            yield Damage(1, _too_big(len(data), limit), data[:4096])
        return
    try:
        yield Doc(orjson.loads(data), 1)
        return
    except orjson.JSONDecodeError:
        pass

    text = data.decode("utf-8", "surrogateescape")
    if looks_like_json_lines(text):
        yield from _json_lines(text, limit)
        return
    pos = _skip_ws(text, 0)
    if text.startswith("\ufeff", pos):
        pos += 1
    while pos < len(text):
        start = pos
        try:
            value, end = _raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield from _salvage(text, start, exc)
            found = _NEXT_DOC.search(text, exc.pos)
            if not found:
                return
            pos = found.end()
            continue
        chunk = text[start:end]
        if _SURROGATE.search(chunk):
            yield from _split_invalid_utf8(chunk, _line_at(text, start))
        else:
            yield Doc(value, _line_at(text, start))
        pos = _skip_ws(text, end)


_STREAM_MIN_BYTES = 4 << 20
_ITEMS_KEY = re.compile(rb'\n([ \t]*)"items"\s*:\s*\[\s*?\n([ \t]+)\{')


def _too_big(size: int, limit: int) -> str:
    return (
        f"JSON document of {size:,} bytes is over ingest.max_document ({limit:,} bytes); not read"
    )


def _list_items(data: bytes, limit: int) -> Iterator[Doc | Damage] | None:
    """The items of a pretty-printed `{"items": [...]}` one by one, or None when the file is
    not laid out that way (minified, another shape): then it is parsed whole.

    In pretty-printed JSON every item of the list starts on a line of its own at the same
    indentation, and nothing deeper is indented that little, so the item boundaries can be
    found without parsing; strings cannot hold a raw newline.
    """
    head = _ITEMS_KEY.search(data, 0, 4096)
    if head is None:
        return None
    key_indent, item_indent = head.group(1), head.group(2)
    first = head.end() - 1  # the "{" of the first item
    probe = data[first : first + 2048]
    if b'"kind"' not in probe or b'"apiVersion"' not in probe:
        return None  # items without a kind (a raw API list): parse whole, route by the List
    boundary = re.compile(b"\n" + re.escape(item_indent) + rb"\{")
    starts = [first, *(m.start() + 1 + len(item_indent) for m in boundary.finditer(data, first))]
    close = re.compile(b"\n" + re.escape(key_indent) + rb"\]")
    return _split_items(data, starts, close, limit)


def _split_items(
    data: bytes, starts: list[int], close: re.Pattern[bytes], limit: int
) -> Iterator[Doc | Damage]:
    line, counted = 1, 0
    for number, start in enumerate(starts):
        if number + 1 < len(starts):
            stop = starts[number + 1]
        else:
            end = close.search(data, start)
            stop = end.start() if end else len(data)
        chunk = data[start:stop].rstrip().rstrip(b",")
        line += data.count(b"\n", counted, start)
        counted = start
        if len(chunk) > limit:
            yield Damage(line, _too_big(len(chunk), limit), chunk[:4096])
            continue
        try:
            yield Doc(orjson.loads(chunk), line)
        except orjson.JSONDecodeError as exc:
            truncated = stop == len(data)
            reason = (
                "truncated JSON document (the file ends in the middle of a value)"
                if truncated
                else f"invalid JSON: {exc}"
            )
            yield Damage(line, reason, chunk[:65536])


def looks_like_json_lines(text: str) -> bool:
    """JSON Lines: more than one line, and most of the first lines are whole JSON objects on
    their own (a torn or garbage line among them does not change what the file is)."""
    head = [line for line in text.lstrip("\ufeff").split("\n", _SNIFF)[:_SNIFF] if line.strip()]
    if len(head) < 2:
        return False
    whole = 0
    for line in head:
        if line.lstrip().startswith("{"):
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            whole += 1
    return whole * 2 > len(head)


_SNIFF = 20


def _json_lines(text: str, limit: int = 1 << 62) -> Iterator[Doc | Damage]:
    for number, line in enumerate(text.lstrip("\ufeff").split("\n"), start=1):
        if not line.strip():
            continue
        if len(line) > limit:
            yield Damage(number, _too_big(len(line), limit), _encode(line[:4096]))
            continue
        if _SURROGATE.search(line):
            yield Damage(number, "invalid UTF-8 in this line", _encode(line))
            continue
        try:
            yield Doc(orjson.loads(line), number)
        except orjson.JSONDecodeError as exc:
            reason = "truncated JSON line" if number >= text.count("\n") else "invalid JSON"
            yield Damage(number, f"{reason}: {exc}", _encode(line))


def _split_invalid_utf8(chunk: str, line: int) -> Iterator[Doc | Damage]:
    """A document with undecodable bytes: keep its clean list elements, reject the others."""
    value, damages = _partial(chunk, 0)
    if value is not None:
        yield Doc(value, line, partial=True)
    if not damages:
        match = _SURROGATE.search(chunk)
        assert match is not None
        byte = ord(match.group()) - 0xDC00
        damages = [(0, len(chunk), f"invalid UTF-8 byte 0x{byte:02x}")]
    for begin, end, reason in damages:
        yield Damage(line + chunk.count("\n", 0, begin), reason, _encode(chunk[begin:end]))


def _salvage(text: str, start: int, error: json.JSONDecodeError) -> Iterator[Doc | Damage]:
    """Recover the intact elements of a damaged `{"key": [...]}` or `[...]` document."""
    value, damages = _partial(text, start)
    if value is not None:
        yield Doc(value, _line_at(text, start), partial=True)
    if not damages:
        end = _NEXT_DOC.search(text, error.pos)
        damages = [(start, end.start() if end else len(text), _describe(text, error))]
    for begin, end_pos, reason in damages:
        yield Damage(_line_at(text, begin), reason, _encode(text[begin:end_pos][:65536]))


_TRUNCATED = "truncated JSON document (the file ends in the middle of a value)"


def _describe(text: str, error: json.JSONDecodeError) -> str:
    if error.pos >= len(text.rstrip()):
        return _TRUNCATED

    return f"invalid JSON: {error.msg} (line {error.lineno} column {error.colno})"


_Span = tuple[int, int, str]  # start, end, reason of one damaged stretch


def _partial(text: str, start: int) -> tuple[Any, list[_Span]]:
    """Parse as much of a top-level object or array as is intact.

    Only arrays are descended into (that is where exports keep their records); a damaged
    element is skipped and reported, and parsing resumes at the next element.
    """
    pos = _skip_ws(text, start)
    if pos >= len(text) or text[pos] not in "[{":
        return None, []
    if text[pos] == "[":
        items, array_damages, _ = _partial_array(text, pos)
        return (items or None), array_damages
    out: dict[str, Any] = {}
    damages: list[_Span] = []
    pos = _skip_ws(text, pos + 1)
    while pos < len(text) and text[pos] != "}":
        try:
            key, pos = _raw_decode(text, pos)
            pos = _skip_ws(text, pos)
            if not isinstance(key, str) or not text.startswith(":", pos):
                raise json.JSONDecodeError("expected a key and a colon", text, pos)
            pos = _skip_ws(text, pos + 1)
            if text.startswith("[", pos):
                out[key], found, pos = _partial_array(text, pos)
                damages.extend(found)
            else:
                out[key], pos = _raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            end = _NEXT_DOC.search(text, exc.pos)
            damages.append((exc.pos, end.start() if end else len(text), _describe(text, exc)))
            break
        pos = _skip_ws(text, pos)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
    usable = any(isinstance(v, list) and v for v in out.values())
    return (out if usable else None), damages


def _partial_array(text: str, pos: int) -> tuple[list[Any], list[_Span], int]:
    """The intact elements of the array at `pos`, the damaged stretches, and where it ends."""
    items: list[Any] = []
    damages: list[_Span] = []
    pos = _skip_ws(text, pos + 1)
    while pos < len(text):
        if text[pos] == "]":
            return items, damages, pos + 1
        try:
            value, end = _raw_decode(text, pos)
            if _SURROGATE.search(text, pos, end):
                damages.append((pos, end, "invalid UTF-8 inside this record"))
            else:
                items.append(value)
        except json.JSONDecodeError as exc:
            resume = _next_element(text, pos, exc.pos)
            if resume is None:
                # Nothing parses after it: the file ends inside this element.
                damages.append((pos, len(text), _TOO_DEEP if exc.msg == _TOO_DEEP else _TRUNCATED))
                return items, damages, len(text)
            reason = _describe(text, exc)

            damages.append((pos, resume, reason))
            end = resume
        pos = _skip_ws(text, end)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
    if not damages or damages[-1][1] < len(text):
        damages.append((pos, len(text), "truncated JSON document (the file ends inside a list)"))
    return items, damages, len(text)


def _next_element(text: str, start: int, failed_at: int) -> int | None:
    """Where the element after a damaged one begins: the next sibling at the same indentation
    (pretty-printed exports) or the next `},{` (minified ones) that parses."""
    line_start = text.rfind("\n", 0, start) + 1
    indent = text[line_start:start]
    pattern = (
        re.compile(r"\n" + re.escape(indent) + r"(?=\{)")
        if indent.strip() == "" and indent
        else re.compile(r"\}\s*,\s*(?=\{)")
    )
    for match in pattern.finditer(text, max(failed_at, start + 1)):
        try:
            _raw_decode(text, match.end())
        except json.JSONDecodeError:
            continue
        # The separator before the sibling belongs to the damaged stretch.
        return match.end()
    return None
