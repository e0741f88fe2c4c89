"""``ssl.principal.mapping.rules``: from a client certificate's distinguished name to a principal name.

Kafka's syntax (``SslPrincipalMapper``): a comma-separated list of rules, tried in order, the first that
applies wins::

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=([^,]*).*$/$1/, DEFAULT

* M1. ``DEFAULT`` applies to every name and keeps it unchanged (the whole RFC 2253 DN: ``CN=alice,O=Acme``).
* M2. ``RULE:pattern/replacement/`` applies when the regular expression matches the *whole* DN; the result is
  the replacement with ``$1``... replaced by the groups (a ``$n`` beyond the pattern's groups stays literal
  text, as Kafka escapes it); a trailing ``L`` or ``U`` lower- or upper-cases the result.
* M3. A ``/`` or ``\\`` inside a pattern or replacement is written ``\\/`` or ``\\\\``; a comma is just a comma
  (the parser reads up to the unescaped ``/``).
* M4. A DN no rule applies to is refused (Kafka: "No rules apply to ..."); a malformed rule list is a
  configuration error at start, never a surprise at the first connection.
* M5. The empty list is ``DEFAULT`` (Kafka's default value of the config).

Patterns use Python's ``re`` (close to Java's for the patterns these rules use: groups, classes, anchors,
lazy quantifiers); the DN is an operator's certificate subject, not client-chosen text to match against a
client-chosen pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONFIG = "ssl.principal.mapping.rules"


class PrincipalMappingError(ValueError):
    """A rule list that cannot be parsed, or a DN no rule applies to."""


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One parsed rule; ``pattern`` is None for DEFAULT."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        """M1, M2: the mapped name, or None when this rule does not apply to ``dn``."""
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        result = _expand(self.replacement, match)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's replacement syntax: ``$n`` a group, ``\\x`` the character x (M2, M3)."""
    out: list[str] = []
    i = 0
    groups = match.re.groups
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit() and int(replacement[i + 1 : j + 1]) <= groups:
                j += 1
            if j == i + 1:
                out.append(replacement[i : i + 2])  # $n beyond the groups: literal (M2)
                i += 2
            else:
                out.append(match.group(int(replacement[i + 1 : j])) or "")
                i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _read_part(text: str, start: int) -> tuple[str, int]:
    """Reads up to the next unescaped ``/`` (M3); returns the raw part and the index after the ``/``."""
    i = start
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 2
        elif text[i] == "/":
            return text[start:i], i + 1
        else:
            i += 1
    raise PrincipalMappingError(f"rule at position {start} has no closing '/': {text!r}")


def _unescape_slashes(pattern: str) -> str:
    """``\\/`` -> ``/`` in a pattern (Python's ``re`` reads ``\\/`` as ``/`` too, but say it plainly)."""
    return pattern.replace("\\/", "/")


def parse_rules(text: str) -> tuple[MappingRule, ...]:
    """Parses an ``ssl.principal.mapping.rules`` value (M3, M4, M5)."""
    rules: list[MappingRule] = []
    i = 0
    n = len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        if text.startswith("DEFAULT", i):
            rules.append(MappingRule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            raw_pattern, i = _read_part(text, i + len("RULE:"))
            replacement, i = _read_part(text, i)
            case = ""
            if i < n and text[i] in "LU":
                case = text[i]
                i += 1
            try:
                pattern = re.compile(_unescape_slashes(raw_pattern))
            except re.error as exc:
                raise PrincipalMappingError(f"invalid pattern {raw_pattern!r} in {CONFIG}: {exc}") from exc
            rules.append(MappingRule(pattern, replacement, case))
        else:
            raise PrincipalMappingError(f"invalid rule in {CONFIG} at position {i}: {text[i:]!r}")
        while i < n and text[i].isspace():
            i += 1
        if i < n:
            if text[i] != ",":
                raise PrincipalMappingError(f"invalid rule in {CONFIG} at position {i}: {text[i:]!r}")
            i += 1
    return tuple(rules) or (MappingRule(None),)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Maps certificate DNs to principal names with a parsed rule list."""

    rules: tuple[MappingRule, ...] = (MappingRule(None),)

    @classmethod
    def from_config(cls, text: str) -> PrincipalMapper:
        return cls(parse_rules(text))

    def principal_name(self, dn: str) -> str:
        """The name of ``User:<name>`` for the DN (M1, M2), or PrincipalMappingError (M4)."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise PrincipalMappingError(f"no rule of {CONFIG} applies to {dn!r}")
