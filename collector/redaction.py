"""Secrets never reach the index: one redaction step over every record of every source.

Two kinds of rules, applied to a record's message, every text in its attributes, its raw body
and its pod labels, and to the bytes of a quarantined record:

- Token shapes, from detect-secrets' plugins (a maintained list: AWS, GitHub, GitLab, Slack
  tokens and webhooks, JWTs, Stripe, SendGrid, Twilio, PyPI, npm, Azure storage keys, private
  keys ...), plus the ones it lacks that training jobs print (Hugging Face `hf_`, OpenAI-style
  `sk-`, W&B's 40-hex keys after a key name) and whole PEM private-key blocks.
- Key names: a value whose key says it is secret (`*_KEY`, `*_TOKEN`, `*_SECRET`,
  `*PASSWORD*`, `*CREDENTIALS*`, `Authorization`), in every layout a record holds: `NAME=value`,
  `NAME: value`, `"name": "value"`, a Kubernetes env var `{"name": "X_TOKEN", "value": "..."}`
  (also JSON-escaped inside the last-applied-configuration annotation), `--password value`,
  credentials in a URL.

A literal prefilter (one Aho-Corasick pass over the lower-cased text) skips the patterns for
the texts that hold no hint of a secret, which is nearly all of them: it costs about 6 us a
kilobyte, where running every pattern costs half a millisecond. Token shapes with no literal of
their own (Twilio's `AC`/`SK` + 32, Telegram's `digits:35`, Mailchimp's `-us1`) are found only
in a text that holds some hint (most often their key name, which masks them anyway).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import Any, Final, TypeVar

import ahocorasick

from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence

__all__ = ["MASK", "quarantine_body", "redact_bytes", "redact_record", "redact_text"]

MASK: Final = "[REDACTED]"

# A name as configs and env vars spell it: words joined by _ . - or camelCase. Matched
# possessively (linear on a 64 KiB run of `key_key_...`); whether it names a secret is decided
# on its words, in `_is_secret_name`.
_IDENT: Final = r"[A-Za-z0-9]++(?:[_.-][A-Za-z0-9]++)*+"
_WORDS: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# A name ending in one of these words holds a secret ...
_SECRET_LAST: Final = frozenset(
    {"password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "credentials",
     "apikey", "privatekey", "authorization", "dsn", "pat", "pgpassword", "signature", "sig"}
)  # fmt: skip
# ... and so does one ending in `key` after one of these (API_KEY, secretAccessKey), while
# label_key, cache_key or a toleration's "key" do not.
_KEY_AFTER: Final = frozenset(
    {"api", "access", "secret", "private", "signing", "client", "license", "encryption",
     "master", "account", "auth", "ssh", "session", "service", "admin"}
)  # fmt: skip
# Names that end like a secret but hold none (their values name a secret, or count tokens).
_NOT_SECRET: Final = re.compile(
    r"(?i)(?:secretName|secretRef|secretKeyRef|tokenExpirationSeconds|serviceAccountToken|"
    r"automountServiceAccountToken|secret[_-]?name|key[_-]?ref|KEY_ID)$"
)


def _is_secret_name(name: str) -> bool:
    if len(name) > 80 or _NOT_SECRET.search(name):
        return False
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words:
        return False
    if words[-1] in _SECRET_LAST:
        return True
    return words[-1] == "key" and len(words) > 1 and words[-2] in _KEY_AFTER


# Not a reference, a placeholder, a list, or an auth scheme (its own rule masks what follows).
# Nor a boolean or a small number (`secret: true`, `token: 512`).
_VALUE = (
    r"(?![\[{(]|\$\(|\$\{|<|(?i:bearer|basic|digest|true|false|null|none)\b|\d{1,7}\b)"
    r"[^\s,;'\"\\]{3,}"
)
# A quote as JSON writes it at any depth of escaping: ", \", \\\" (JSON in a JSON string,
# as in the last-applied-configuration annotation).
_Q = r'(?P<q>(?<!\\)\\*+")'
# Up to the next quote (at any escaping); possessive, so a run of backslashes stays linear.
_QUOTED = r'(?P<secret>(?:[^"\\]++|\\++(?!"))*+)'
# Where a name starts: not inside a word, or right after an escaped newline or tab.
_START = r"(?:(?<![\w.\\-])|(?<=\\[nrt]))"
_KEY_VALUE_RULES: Final = (
    # Kubernetes env var objects, plain or JSON-escaped (last-applied-configuration).
    re.compile(
        r"(?P<pre>" + _Q + r"name(?P=q)\s*:\s*(?P=q)(?P<name>" + _IDENT + r")(?P=q)\s*,"
        r"\s*(?P=q)value(?P=q)\s*:\s*(?P=q))" + _QUOTED,
        re.IGNORECASE,
    ),
    # YAML env vars: `- name: X_TOKEN` then `value: ...` on the next line.
    re.compile(
        r"(?P<pre>name:\s*['\"]?(?P<name>" + _IDENT + r")['\"]?\s*\n\s*value:\s*['\"]?)"
        r"(?P<secret>[^'\"\n]+)",
        re.IGNORECASE,
    ),
    # "name": "value" in JSON (and JSON-escaped JSON).
    re.compile(
        r"(?P<pre>" + _Q + r"(?P<name>" + _IDENT + r")(?P=q)\s*:\s*(?P=q))" + _QUOTED,
        re.IGNORECASE,
    ),
    # NAME=value, NAME: value, NAME = "value", --name=value. The value is looked at, not
    # consumed, so `cmd=WANDB_API_KEY=...` is searched again from `WANDB_API_KEY`.
    re.compile(
        r"(?P<pre>" + _START + r"(?:--?)?(?P<name>" + _IDENT + r")[\\'\"]*+(?:[ \t]*=|:)[ \t]*"
        r"[\\'\"]*+)(?=(?P<secret>" + _VALUE + r"))",
        re.IGNORECASE,
    ),
    # --name value (a command line).
    re.compile(
        r"(?P<pre>" + _START + r"--(?P<name>" + _IDENT + r")[ \t]+)(?=(?P<secret>" + _VALUE + r"))",
        re.IGNORECASE,
    ),
    # Authorization headers: Bearer, Basic, token.
    re.compile(
        r"(?P<pre>(?P<name>authorization|proxy-authorization)[\\'\"]*\s*[:=]\s*[\\'\"]*"
        r"(?:bearer|basic|token|digest)?\s*)(?P<secret>[A-Za-z0-9._~+/=-]{8,})",
        re.IGNORECASE,
    ),
)
# Credentials in a URL (scheme://user:password@host): checked whenever a text has "://" and "@".
_URL_CREDENTIALS: Final = re.compile(r"(?P<pre>://[^/\s:@\"']*:)(?P<secret>[^/\s@\"']+)(?=@)")

# Shapes detect-secrets has no plugin for, seen in training jobs' logs and pod specs.
_EXTRA_SHAPES: Final = (
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----.*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----",
        re.DOTALL,
    ),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:\\n|\n|[A-Za-z0-9+/= ])*"),
    re.compile(r"\beyJ[A-Za-z0-9_=-]++\.[A-Za-z0-9_=-]++\.[A-Za-z0-9_.+/=-]*+"),  # a whole JWT
    re.compile(r"(?<=AccountKey=)[A-Za-z0-9+/=]{86,88}"),  # Azure storage, without its name
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
    re.compile(r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]+"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bnpm_[A-Za-z0-9]{36}"),
    re.compile(r"\bdckr_pat_[A-Za-z0-9_-]{20,}"),
)

# Lower-cased literals one of which every rule above needs: a text with none is left alone.
_HINTS: Final = (
    "key", "token", "secret", "passw", "passphrase", "credential", "authoriz", "pwd", "_pat",
    "private", "putty", "akia", "asia", "abia", "acca", "a3t", "ghp_", "gho_", "ghu_",
    "ghs_", "ghr_", "github_pat", "glpat", "gldt", "glft", "glsoat", "glrt", "gr1348941",
    "glcbt", "glimt", "glptt", "glagent", "gloas", "xox", "xapp-", "hooks.slack", "eyj", "sg.",
    "sk_live", "rk_live", "sk-", "hf_", "pypi-", "sq0csp", "accountkey", "_authtoken", "aiza",
    "ya29.", "npm_", "dckr_pat", "dsn",
)  # fmt: skip
_T = TypeVar("_T", Evidence, PodRecord)


@lru_cache(maxsize=1)
def _detect_secrets_shapes() -> tuple[re.Pattern[str], ...]:
    """Every token-shape pattern of detect-secrets' plugins, except the ones that are not
    secrets to us (public IPs) or that need entropy or keywords (covered by the key rules)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    # Public IPs are no secret to us; keywords are the key rules' job. These backtrack on a
    # long line (IBM's keyword patterns never finish on `key: ` and 20,000 spaces) and what
    # they find is a key rule's too: `cloudant_password=`, `softlayer_api_key=`, `_authToken=`.
    # tests/collector/test_secrets.py times every pattern kept.
    skip = {
        "IPPublicDetector",
        "KeywordDetector",
        "NpmDetector",
        "IbmCloudIamDetector",
        "IbmCosHmacDetector",
        "CloudantDetector",
        "SoftlayerDetector",
    }
    shapes: list[re.Pattern[str]] = []
    plugins: Iterable[Any] = get_mapping_from_secret_type_to_class().values()
    for plugin in plugins:
        if plugin.__name__ in skip:
            continue
        shapes.extend(getattr(plugin(), "denylist", None) or ())
    return tuple(shapes)


@lru_cache(maxsize=1)
def _automaton() -> Any:
    automaton = ahocorasick.Automaton()
    for hint in _HINTS:
        automaton.add_word(hint, hint)
    automaton.make_automaton()
    return automaton


def _mask_spans(text: str, pattern: re.Pattern[str]) -> str:
    """Replace each match's secret: its `secret` group, else its first group, else the whole
    match less the delimiters some detect-secrets patterns include."""
    out: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        if "secret" in pattern.groupindex:
            start, end = match.span("secret")
        elif pattern.groups and match.group(1) is not None and match.start(1) > match.start():
            start, end = match.span(1)  # the secret after its context, not a prefix like "ghp"
        else:
            start, end = match.span()
            while start < end and text[start] in " \t=:\"'":
                start += 1
            while end > start and text[end - 1] in " \t\"'":
                end -= 1
        if end <= start or start < last or text[start:end] == MASK:
            continue  # nothing, inside a secret masked already, or masked before
        if "name" in pattern.groupindex and not _is_secret_name(match.group("name") or ""):
            continue
        out.append(text[last:start])
        out.append(MASK)
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def redact_text(text: str) -> str:
    """The text with every secret it holds replaced by [REDACTED]."""
    if not text or not _hinted(text):
        return text
    if "://" in text and "@" in text:
        text = _mask_spans(text, _URL_CREDENTIALS)
    # Key rules first: a value under a secret name is masked whole, whatever its shape.
    for pattern in (*_KEY_VALUE_RULES, *_EXTRA_SHAPES, *_detect_secrets_shapes()):
        text = _mask_spans(text, pattern)
    return text


def redact_bytes(data: bytes) -> bytes:
    """Raw bytes (a record's body, a quarantined line) redacted as text; undecodable bytes
    are kept as they were."""
    return _redacted_raw(data) or data


def quarantine_body(body: bytes | None, limit: int = 65536) -> bytes | None:
    """What the quarantine keeps of a rejected record: redacted, then cut (redacting twice the
    limit first, so a token across the cut is still recognised and masked whole)."""
    return None if body is None else redact_bytes(body[: 2 * limit])[:limit]


def _redact_value(value: Any, secret: bool = False) -> Any:
    if isinstance(value, str):
        return MASK if secret and value else redact_text(value)
    if isinstance(value, dict):
        return {
            k: _redact_value(v, secret or (isinstance(k, str) and _is_secret_name(k)))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact_value(v, secret) for v in value]
    return value


def _hinted(text: str) -> bool:
    return next(_automaton().iter(text.lower()), None) is not None or (
        "://" in text and "@" in text
    )


@lru_cache(maxsize=32)
def _redacted_raw(raw: bytes) -> bytes | None:
    """A raw body redacted, or None when it holds no hint of a secret. Cached: the records
    read from one document often share its body (a Scheduled Events document, one record per
    VM), and scanning it once per record made a 70 KB document cost half a minute."""
    text = raw.decode("utf-8", "surrogateescape")
    redacted = redact_text(text)
    return None if redacted is text else redacted.encode("utf-8", "surrogateescape")


def redact_record(record: _T) -> _T:
    """The record with secrets masked in its message, attributes, raw body and labels.

    Attributes are read from the raw body (or, for a log line, from the message), so a record
    whose message and raw body hold no hint of a secret holds none anywhere."""
    if isinstance(record, Evidence):
        raw = _redacted_raw(record.raw) if isinstance(record.raw, bytes) and record.raw else None
        text = record.message if isinstance(record.message, str) else str(record.message)
        if raw is None and record.raw and isinstance(record.attrs, dict):
            hinted = _hinted(text)
        else:
            attrs_text = (
                repr(record.attrs) if isinstance(record.attrs, dict) and record.attrs else ""
            )
            hinted = raw is not None or _hinted(text + "\n" + attrs_text)
        if not hinted:
            return record
        message = redact_text(record.message) if text is record.message else record.message
        attrs = _redact_value(record.attrs) if isinstance(record.attrs, dict) else record.attrs
        return replace(
            record, message=message, attrs=attrs, raw=raw if raw is not None else record.raw
        )
    if not isinstance(record.labels, dict) or not _hinted(repr(record.labels)):
        return record
    return replace(record, labels=_redact_value(record.labels))
