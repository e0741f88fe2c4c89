"""``subscribed_topic_regex`` (KIP-848): a member subscribes to every topic whose name the regex matches.

Kafka evaluates it with RE2/J, so the syntax is RE2's and matching takes time linear in the topic name,
whatever the pattern: a user's regex cannot freeze a coordinator by catastrophic backtracking. We use
RE2 itself (``google-re2``). A name matches when the whole name does (``Matcher.matches``).

- A regex RE2 does not accept (backreferences, lookaround, a pattern too large for RE2's memory bound) is
  refused with INVALID_REGULAR_EXPRESSION before anything is stored (``broker.group.shard``).
- A stored regex that no longer compiles (written by a version that checked with another syntax) matches
  no topic, with a warning, instead of failing every computation of its group's assignment.

Compiled patterns are kept in a small LRU cache (one per distinct regex in use). Thread-safe: the cache
is ``functools.lru_cache``'s, and compiled RE2 objects are immutable.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

import re2

logger = logging.getLogger(__name__)

MAX_REGEX_BYTES = 8192  # longer than any sensible topic regex; RE2's max_mem bounds the compiled size too


class InvalidTopicRegexError(ValueError):
    """The regex is not valid RE2 (the message says why)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # refusals are answered, not logged by RE2 on stderr
    options.never_capture = True  # groups only group: nothing is extracted
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidTopicRegexError(reason) from None


def check(pattern: str) -> None:
    """Raise InvalidTopicRegexError unless ``pattern`` is a valid RE2 regex of at most MAX_REGEX_BYTES."""
    if len(pattern.encode("utf-8", errors="surrogatepass")) > MAX_REGEX_BYTES:
        raise InvalidTopicRegexError(f"the regex is longer than {MAX_REGEX_BYTES} bytes")
    _compile(pattern)


def matching(pattern: str, names: Iterable[str]) -> set[str]:
    """The names ``pattern`` matches whole; none when it is not valid RE2 (logged)."""
    try:
        check(pattern)
        compiled = _compile(pattern)
    except InvalidTopicRegexError as exc:
        logger.warning("stored subscribed_topic_regex %r is not valid RE2 (%s): it matches no topic", pattern, exc)
        return set()
    return {name for name in names if compiled.fullmatch(name) is not None}
