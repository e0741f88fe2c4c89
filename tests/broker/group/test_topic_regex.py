"""subscribed_topic_regex with RE2: Kafka's syntax (RE2/J), whole-name matches, linear time, bad ones refused."""

from __future__ import annotations

import pytest

from broker.group import topic_regex


def test_whole_names_match() -> None:
    assert topic_regex.matching(r"orders-.*", ["orders-1", "orders", "my-orders-1"]) == {"orders-1"}
    assert topic_regex.matching(r"a|b", ["a", "b", "ab"]) == {"a", "b"}


TOO_LONG = "x" * (topic_regex.MAX_REGEX_BYTES + 1)


@pytest.mark.parametrize("pattern", ["(", r"(a)\1", "(?=a)b", "(?<!a)b", "a{2,1}", TOO_LONG])
def test_what_re2_does_not_accept_is_refused(pattern: str) -> None:
    with pytest.raises(topic_regex.InvalidTopicRegexError):
        topic_regex.check(pattern)
    assert topic_regex.matching(pattern, ["a", "b"]) == set()  # stored by an older version: matches nothing


def test_catastrophic_backtracking_patterns_run_in_linear_time() -> None:
    """``(a+)+$`` takes exponential time in a backtracking engine on ``aaaa...b``; RE2 answers at once (this
    would not finish in Python's ``re`` with 60 a's). No timing is asserted: the call simply returns."""
    names = ["a" * 60 + "b", "a" * 10_000 + "!"]
    assert topic_regex.matching(r"(a+)+$", names) == set()
    assert topic_regex.matching(r"(a|aa)+b", names) == {"a" * 60 + "b"}
