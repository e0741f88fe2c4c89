"""Session tokens (``controller/security/token.py`` T1-T3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.security.token import TokenError, TokenSigner

KEY = b"k" * 32


def test_t1_t2_issue_verify_expire() -> None:
    signer = TokenSigner(KEY)
    token, session = signer.issue("User:alice", "SCRAM-SHA-256", now_ms=1000, lifetime_ms=500)
    assert session.expires_ms == 1500
    assert signer.verify(token, 1000) == session
    assert signer.verify(token, 1499) == session
    with pytest.raises(TokenError) as expired:
        signer.verify(token, 1500)
    assert expired.value.expired
    assert expired.value.code == "SASL_AUTHENTICATION_FAILED"
    with pytest.raises(TokenError) as other:
        TokenSigner(b"o" * 32).verify(token, 1000)  # T1: another node's key
    assert not other.value.expired


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0), char=st.sampled_from("AZaz09-_.="))
def test_t3_any_change_invalidates(position: int, char: str) -> None:
    signer = TokenSigner(KEY)
    token, _ = signer.issue("User:alice", "PLAIN", 0, 10_000)
    i = position % len(token)
    changed = token[:i] + char + token[i + 1 :]
    if changed == token:
        return
    with pytest.raises(TokenError):
        signer.verify(changed, 1)


@pytest.mark.parametrize("junk", ["", ".", "a.b", "x" * 5000, "é.é", "a.b.c"])
def test_t3_malformed(junk: str) -> None:
    with pytest.raises(TokenError):
        TokenSigner(KEY).verify(junk, 0)


def test_key_and_lifetime_checks() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TokenSigner(b"short")
    with pytest.raises(ValueError, match="positive"):
        TokenSigner(KEY).issue("User:a", "PLAIN", 0, 0)
