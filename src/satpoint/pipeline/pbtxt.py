"""Protocol-buffer text format (Triton's ``config.pbtxt``) read into plain data, without the schema.

Every field becomes a list of its values (the format does not say which fields repeat): a message is a
``dict[str, list[Any]]``, a scalar stays the token's text (strings unquoted, adjacent strings joined).  Enough
for ``ensemble_scheduling``; what a field means is the reader's business.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(?P<punct>[{}\[\]<>:,;])|(?P<word>[^\s{}\[\]<>:,;"'\#]+)"""
)
_CLOSE = {"{": "}", "<": ">"}


class PbtxtError(ValueError):
    """Text that is not protocol-buffer text format (the message says where)."""


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PbtxtError(f"line {text.count(chr(10), 0, pos) + 1}: unexpected {text[pos]!r}")
        kind = m.lastgroup
        if kind is not None:
            out.append((kind, m.group(kind), text.count("\n", 0, pos) + 1))
        pos = m.end()
    return out


def parse_pbtxt(text: str) -> dict[str, list[Any]]:
    """``text`` as nested dicts of lists (see the module's doc); ``PbtxtError`` names the line it stopped at."""
    tokens = _tokens(text)
    pos = 0

    def peek() -> tuple[str, str, int] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, str, int]:
        nonlocal pos
        if pos >= len(tokens):
            last = tokens[-1][2] if tokens else 1
            raise PbtxtError(f"line {last}: the text ends inside a message")
        pos += 1
        return tokens[pos - 1]

    def scalar() -> Any:
        kind, value, line = take()
        if kind == "str":
            parts = [_unquote(value)]
            while (nxt := peek()) is not None and nxt[0] == "str":
                parts.append(_unquote(take()[1]))
            return "".join(parts)
        if kind == "word":
            return value
        if value in _CLOSE:
            return message(_CLOSE[value])
        raise PbtxtError(f"line {line}: expected a value, got {value!r}")

    def message(end: str | None) -> dict[str, list[Any]]:
        fields: dict[str, list[Any]] = {}
        while True:
            tok = peek()
            if tok is None:
                if end is not None:
                    take()  # raises: the text ends inside a message
                return fields
            kind, value, line = take()
            if end is not None and value == end and kind == "punct":
                return fields
            if kind != "word":
                raise PbtxtError(f"line {line}: expected a field name, got {value!r}")
            nxt = peek()
            if nxt is not None and nxt[1] == ":":
                take()
            nxt = peek()
            values = fields.setdefault(value, [])
            if nxt is not None and nxt[1] == "[":
                take()
                while (inner := peek()) is not None and inner[1] != "]":
                    values.append(scalar())
                    if (sep := peek()) is not None and sep[1] == ",":
                        take()
                take()
            else:
                values.append(scalar())
            if (sep := peek()) is not None and sep[1] in (",", ";"):
                take()

    return message(None)
