"""Secrets never leave the process: the one redaction every written or printed URL, header and message uses.

What the server needs (the token, the password, the signed query) is sent on the wire unchanged;
what satpoint writes (``results.json``, ``summary.json``, ``report.html``, compare files) or prints
(summaries, progress lines, errors) goes through these functions first:

* headers (``"Name: value"`` lines or ``(name, value)`` pairs) whose *name* carries a secret keep the
  name and lose the value: ``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie`` and
  every name containing ``auth``, ``token``, ``secret``, ``password``, ``api-key``/``apikey``/``api_key``,
  ``credential``, ``signature``, ``session`` or a ``key`` part (``X-API-Key``,
  ``Ocp-Apim-Subscription-Key``).  An ``Authorization`` value keeps its scheme (``Bearer ***``).
* URLs lose their userinfo (``user:pass@`` → ``user:***@``; a lone ``token@`` → ``***@``) and the values
  of secret-like query parameters (``token``, ``access_token``, ``api_key``, ``key``, ``sig``,
  ``signature``, ``password``, ``secret``, ``code``, ``X-Amz-Signature`` …); other parameters stay.
* free text (error messages, progress lines) loses the same things wherever a URL or a header line
  appears in it, and any literal secret value the caller knows (``secret_values``), which catches a
  server that echoes a token back in an error body.

Imports nothing of satpoint: every layer may use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "***"

_SECRET_NAME_PARTS: tuple[str, ...] = ("auth", "token", "secret", "passw", "apikey", "api-key", "api_key")
_SECRET_NAME_PARTS += ("credential", "signature", "session", "cookie", "private")
_SECRET_NAME_WORDS = frozenset({"key", "sig", "pwd", "pass", "jwt", "sas", "csrf", "xsrf", "otp"})
#: query parameters only (``?code=`` signs Azure Functions URLs; a "code: 14" in a message is a status)
_SECRET_QUERY_WORDS = _SECRET_NAME_WORDS | {"code"}
_WORD_SPLIT = re.compile(r"[-_.\s]+")


def is_secret_name(name: str, *, query: bool = False) -> bool:
    """A header (or, with ``query``, query-parameter) name whose value is a credential (case-insensitive)."""
    low = name.strip().lower()
    if not low:
        return False
    if any(p in low for p in _SECRET_NAME_PARTS):
        return True
    words = _SECRET_QUERY_WORDS if query else _SECRET_NAME_WORDS
    return any(w in words for w in _WORD_SPLIT.split(low))


_AUTH_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)\s+\S")


def redact_value(name: str, value: str) -> str:
    """``value`` unchanged, or ``***`` (``Bearer ***`` for an Authorization scheme) if ``name`` is secret."""
    if not is_secret_name(name):
        return value
    low = name.strip().lower()
    if low in ("authorization", "proxy-authorization"):
        m = _AUTH_SCHEME.match(value.strip())
        if m:
            return f"{m.group(1)} {REDACTED}"
    return REDACTED


def redact_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` pairs with secret values replaced (names kept)."""
    return tuple((k, redact_value(k, v)) for k, v in headers)


def redact_header_line(line: str) -> str:
    """``"Name: value"`` with the value hidden when the name is secret."""
    name, sep, value = line.partition(":")
    if not sep:
        return line
    return f"{name}: {redact_value(name, value.strip())}" if is_secret_name(name) else line


def _redact_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        name, sep, value = item.partition("=")
        if sep and value and is_secret_name(unquote(name), query=True):
            parts.append(f"{name}={REDACTED}")
        else:
            parts.append(item)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """The URL with its userinfo and secret query values hidden; any other URL comes back unchanged."""
    if "@" not in url and "=" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    out = url
    if parts.netloc and "@" in parts.netloc:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user, sep, _ = userinfo.partition(":")
        shown = f"{user}:{REDACTED}" if sep else REDACTED
        out = out.replace(parts.netloc, f"{shown}@{hostport}", 1)
    if parts.query:
        query = _redact_query(parts.query)
        if query != parts.query:
            out = out.replace("?" + parts.query, "?" + query, 1)
    return out


# free text ---------------------------------------------------------------------------------------------
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[A-Za-z0-9_.%-]+)=(?P<value>[^&#\s'\"<>]+)")
_NAME_SEP = re.compile(r"\b(?P<name>[A-Za-z][A-Za-z0-9_-]*)(?P<sep>['\"]?\s*[:=]\s*)(?P<quote>['\"]?)")
#: the value after ``name=`` (one token), after ``name:`` (an optional auth scheme and one token), and
#: after ``Cookie:`` (the rest of the line)
_VALUE_EQ = re.compile(r"[^\s&'\",;}]+")
_VALUE_COLON = re.compile(r"(?:[A-Za-z][A-Za-z0-9._+-]*\s+(?=[^\s'\",;}]))?[^\s'\",;}]+")
_VALUE_LINE = re.compile(r"[^\r\n'\"}]+")


def _userinfo(m: re.Match[str]) -> str:
    user, sep, _ = m["userinfo"].partition(":")
    return f"{m['scheme']}{user}:{REDACTED}@" if sep else f"{m['scheme']}{REDACTED}@"


def _param(m: re.Match[str]) -> str:
    if is_secret_name(unquote(m["name"]), query=True):
        return f"{m['lead']}{m['name']}={REDACTED}"
    return m.group(0)


def _headers_in(text: str) -> str:
    """Hide the value after every ``name: value`` / ``name=value`` whose name is secret."""
    out: list[str] = []
    pos = 0
    for m in _NAME_SEP.finditer(text):
        if m.start() < pos or not is_secret_name(m["name"]):
            continue
        name = m["name"]
        pattern = _VALUE_EQ if "=" in m["sep"] else _VALUE_LINE if "cookie" in name.lower() else _VALUE_COLON
        v = pattern.match(text, m.end())
        if v is None or v.group(0).strip() in ("", REDACTED) or v.group(0).endswith(" " + REDACTED):
            continue
        end, value = v.end(), v.group(0).strip()
        out.append(text[pos : m.end()])
        out.append(redact_value(name, value))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str, secret_values: Iterable[str] = ()) -> str:
    """Free text with URL credentials, secret query values, ``Name: value`` pairs of secret names and
    every literal ``secret_values`` (at least 4 characters long) hidden."""
    text = _headers_in(_QUERY_PARAM.sub(_param, _URL_USERINFO.sub(_userinfo, text)))
    for value in sorted({v for v in secret_values if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def redact_doc(doc: Any, secret_values: Sequence[str] = ()) -> Any:
    """A JSON-like document with :func:`redact_text` applied to every string in it (texts a server wrote,
    such as error messages, may echo a credential); keys, numbers and the structure unchanged."""
    if isinstance(doc, str):
        return redact_text(doc, secret_values)
    if isinstance(doc, dict):
        return {k: redact_doc(v, secret_values) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [redact_doc(v, secret_values) for v in doc]
    return doc


def secret_values(url: str | None = None, headers: Sequence[tuple[str, str]] = ()) -> tuple[str, ...]:
    """The literal secrets in a URL and headers (password or lone user, secret query values, secret
    header values and their credential after an auth scheme), for :func:`redact_text`."""
    found: list[str] = []
    if url:
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is not None:
            if "@" in parts.netloc:
                userinfo = parts.netloc.rpartition("@")[0]
                user, sep, password = userinfo.partition(":")
                found += [password, unquote(password)] if sep else [user, unquote(user)]
            for item in parts.query.split("&"):
                name, sep, value = item.partition("=")
                if sep and is_secret_name(unquote(name), query=True):
                    found += [value, unquote(value)]
    for name, value in headers:
        if is_secret_name(name):
            value = value.strip()
            found.append(value)
            m = _AUTH_SCHEME.match(value)
            if m:
                found.append(value[m.end(1) :].strip())
    return tuple(dict.fromkeys(v for v in found if v))
