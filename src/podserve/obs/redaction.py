"""Which fields of a payload record are replaced by `[REDACTED]`, and the replacing.

A field is named by its dotted path from the root of the document it lives in: a tensor
name, a request parameter (`customer.ssn` is `{"customer": {"ssn": ...}}`), or a key inside
a JSON document carried in a BYTES tensor element. List elements add nothing to the path,
so `customers.ssn` names the `ssn` of every object in the list `customers`.

Three kinds of pattern, all case-insensitive (`SSN`, `Ssn` and `ssn` are one name):

* a name without a dot (`ssn`, `*token*`): a glob matched against the last segment, so it
  matches the key at any depth;
* a dotted path (`customer.ssn`, `*.card.number`): a glob matched against the whole path
  from the root (`*` also crosses dots, so `*.ssn` is any `ssn` below the top level);
* `re:<regex>`: a regular expression searched in the whole dotted path.

A match replaces the whole value, whatever it holds (a dict, a list, a scalar). Redaction
runs on the payload writer thread, never on the request path.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

REDACTED = "[REDACTED]"
REGEX_PREFIX = "re:"


class RedactionPatternError(ValueError):
    """A pattern that cannot be compiled (an invalid regular expression)."""


@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    whole_path: bool  # False: match the last path segment only
    search: bool = False  # a `re:` pattern may match anywhere in the path


def _compile(pattern: str) -> _Pattern:
    text = pattern.strip()
    if text.startswith(REGEX_PREFIX):
        source = text[len(REGEX_PREFIX) :]
        try:
            return _Pattern(re.compile(source, re.IGNORECASE), whole_path=True, search=True)
        except re.error as exc:
            raise RedactionPatternError(f"redaction pattern {pattern!r}: {exc}") from exc
    # fnmatch.translate gives an anchored regex; case-folding both sides makes it
    # case-insensitive without depending on the platform's fnmatch case rules.
    glob = re.compile(fnmatch.translate(text.casefold()))
    return _Pattern(glob, whole_path="." in text)


class Redactor:
    """Compiled redaction patterns; `redact` returns a copy with matching fields replaced."""

    __slots__ = ("_cache", "_patterns")

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self._patterns = tuple(_compile(p) for p in patterns if p.strip())
        # Payload documents repeat the same few paths; remember each answer.
        self._cache: dict[tuple[str, ...], bool] = {}

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def matches(self, path: tuple[str, ...]) -> bool:
        """Whether the field at `path` (segments from the document root) is redacted."""
        if not self._patterns or not path:
            return False
        known = self._cache.get(path)
        if known is not None:
            return known
        folded = ".".join(path).casefold()
        last = path[-1].casefold()
        result = False
        for pattern in self._patterns:
            if pattern.search:
                hit = pattern.regex.search(folded)
            else:
                hit = pattern.regex.match(folded if pattern.whole_path else last)
            if hit:
                result = True
                break
        if len(self._cache) < 4096:  # bounded: paths come from client-chosen keys
            self._cache[path] = result
        return result

    def redact(self, value: Any, path: tuple[str, ...] = ()) -> Any:
        """A copy of `value` (JSON-like: dicts, lists, scalars) with matching fields replaced."""
        if not self._patterns:
            return value
        return self._walk(value, path)[0]

    def redact_json_text(self, text: str) -> str:
        """A JSON document inside a string (a BYTES tensor element), redacted; the text is
        returned unchanged when it is not a JSON object or array or nothing matched."""
        stripped = text.lstrip()
        if not self._patterns or not stripped or stripped[0] not in "{[":
            return text
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        redacted, changed = self._walk(document, ())
        return orjson.dumps(redacted).decode() if changed else text

    def _walk(self, value: Any, path: tuple[str, ...]) -> tuple[Any, bool]:
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            changed = False
            for key, item in value.items():
                child = (*path, str(key))
                if self.matches(child):
                    out[key] = REDACTED
                    changed = True
                else:
                    out[key], item_changed = self._walk(item, child)
                    changed = changed or item_changed
            return out, changed
        if isinstance(value, list | tuple):
            items = [self._walk(item, path) for item in value]
            return [v for v, _ in items], any(c for _, c in items)
        return value, False
