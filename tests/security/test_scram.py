"""SCRAM (``controller/security/scram.py`` S1-S6, ``odradek/security/scram.py`` C1-C3) and PLAIN (P1, P2)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.security import scram as server
from controller.security.plain import authenticate_plain, parse_plain
from controller.security.scram import make_credential
from metadata.scram import ScramCredential, ScramError
from odradek.errors import SaslAuthenticationFailedError
from odradek.security.scram import ScramClient, plain_message

SECRET = b"s" * 32

# RFC 7677 section 3: user "user", password "pencil"
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def store(credential: ScramCredential, name: str = "user") -> dict[str, ScramCredential]:
    return {name: credential}


def test_rfc7677_example_client_side() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert client.final(server_first) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_rfc7677_example_server_side() -> None:
    creds = store(make_credential("SCRAM-SHA-256", "pencil", RFC_SALT, 4096))
    exchange = server.server_first("SCRAM-SHA-256", b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", creds.get, RFC_SERVER_NONCE,
                                   SECRET)
    assert exchange.server_first == (
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert server.server_final(exchange, RFC_CLIENT_FINAL, creds.get) == RFC_SERVER_FINAL


def run(mechanism: str, username: str, password: str, creds: dict[str, ScramCredential]) -> bytes:
    client = ScramClient(mechanism, username, password, "clientnonce123")
    exchange = server.server_first(mechanism, client.first(), creds.get, "servernonce456", SECRET)
    reply = server.server_final(exchange, client.final(exchange.server_first.encode()), creds.get)
    client.verify(reply)
    return reply


@settings(max_examples=20, deadline=None)
@given(
    mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    username=st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s),
    password=st.text(min_size=1, max_size=12),
    salt=st.binary(min_size=1, max_size=24),
)
def test_s2_c3_client_and_server_agree_on_any_name_and_password(
    mechanism: str, username: str, password: str, salt: bytes
) -> None:
    creds = store(make_credential(mechanism, password, salt), name=username)
    assert run(mechanism, username, password, creds).startswith(b"v=")


def test_s2_s4_wrong_password_and_unknown_user_fail_alike() -> None:
    creds = store(make_credential("SCRAM-SHA-512", "right", b"salt"))
    with pytest.raises(ScramError) as wrong:
        run("SCRAM-SHA-512", "user", "wrong", creds)
    with pytest.raises(ScramError) as unknown:
        run("SCRAM-SHA-512", "nobody", "right", creds)
    assert str(wrong.value) == str(unknown.value)
    assert wrong.value.code == "SASL_AUTHENTICATION_FAILED"
    # S4: the unknown user's server-first looks like a real one and is stable (no probe by comparing replies)
    first = [server.server_first("SCRAM-SHA-512", b"n,,n=nobody,r=abc", creds.get, "xyz", SECRET).server_first
             for _ in range(2)]
    assert first[0] == first[1]
    assert ",s=" in first[0]
    assert first[0].endswith(",i=4096")
    # a credential for the other mechanism does not serve this one
    with pytest.raises(ScramError):
        run("SCRAM-SHA-256", "user", "right", creds)


def test_s3_nonce_and_channel_binding_are_checked() -> None:
    creds = store(make_credential("SCRAM-SHA-256", "pw", b"salt"))
    client = ScramClient("SCRAM-SHA-256", "user", "pw", "cn")
    exchange = server.server_first("SCRAM-SHA-256", client.first(), creds.get, "sn", SECRET)
    good = client.final(exchange.server_first.encode())
    bad_nonce = good.replace(b"r=cnsn", b"r=cnsX")
    bad_binding = good.replace(b"c=biws", b"c=" + base64.b64encode(b"y,,"))
    for msg in (bad_nonce, bad_binding, b"c=biws,r=cnsn", b"garbage", b"c=biws,r=cnsn,p=!!!", b"\xff\xfe"):
        with pytest.raises(ScramError):
            server.server_final(exchange, msg, creds.get)
    assert server.server_final(exchange, good, creds.get).startswith(b"v=")


@pytest.mark.parametrize(
    "first",
    [b"p=tls-unique,,n=user,r=abc", b"n,,r=abc,n=user", b"n,,n=user", b"n,,n=,r=abc", b"n,,n=us=er,r=abc",
     b"n,a=other,n=user,r=abc", b"n,,n=user,r=a,b", b"\xff", b""],
)
def test_s3_s5_malformed_client_first_is_refused(first: bytes) -> None:
    with pytest.raises(ScramError):
        server.server_first("SCRAM-SHA-256", first, dict[str, ScramCredential]().get, "sn", SECRET)


def test_saslname_escapes_and_matching_authzid() -> None:
    creds = store(make_credential("SCRAM-SHA-256", "pw", b"salt"), name="a,b=c")
    assert run("SCRAM-SHA-256", "a,b=c", "pw", creds).startswith(b"v=")
    exchange = server.server_first("SCRAM-SHA-256", b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=x", creds.get, "y", SECRET)
    assert exchange.username == "a,b=c"


def test_s1_credential_validation() -> None:
    with pytest.raises(ScramError):
        make_credential("SCRAM-SHA-256", "pw", b"salt", iterations=1000)
    with pytest.raises(ScramError):
        make_credential("SCRAM-SHA-256", "pw", b"salt", iterations=20000)
    with pytest.raises(ScramError):
        make_credential("SCRAM-SHA-1", "pw", b"salt")
    with pytest.raises(ScramError):
        make_credential("SCRAM-SHA-256", "", b"salt")
    cred = make_credential("SCRAM-SHA-512", "pw", b"salt", 8192)
    assert len(cred.stored_key) == len(cred.server_key) == 64
    assert cred.iterations == 8192


def test_c2_client_refuses_a_bad_server_first() -> None:
    for reply in (b"r=other,s=c2FsdA==,i=4096", b"r=cn,s=c2FsdA==,i=4096", b"r=cnX,s=!!,i=4096",
                  b"r=cnX,s=c2FsdA==,i=1", b"r=cnX,s=c2FsdA==,i=99999999", b"junk"):
        with pytest.raises(SaslAuthenticationFailedError):
            ScramClient("SCRAM-SHA-256", "u", "p", "cn").final(reply)
    client = ScramClient("SCRAM-SHA-256", "u", "p", "cn")
    client.final(b"r=cnX,s=c2FsdA==,i=4096")
    with pytest.raises(SaslAuthenticationFailedError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_p1_p2_plain_against_scram_credentials() -> None:
    creds = {
        "alice": [make_credential("SCRAM-SHA-256", "pw256", b"s1"), make_credential("SCRAM-SHA-512", "pw512", b"s2")]
    }

    def lookup(name: str) -> list[ScramCredential]:
        return creds.get(name, [])

    assert authenticate_plain(plain_message("alice", "pw256"), lookup) == "alice"
    assert authenticate_plain(plain_message("alice", "pw512"), lookup) == "alice"
    assert authenticate_plain(b"alice\x00alice\x00pw256", lookup) == "alice"
    for msg in (plain_message("alice", "nope"), plain_message("bob", "pw256"), b"bob\x00alice\x00pw256",
                b"alice\x00pw256", b"\x00\x00pw", b"\x00alice\x00", b"\xff\x00a\x00b"):
        with pytest.raises(ScramError):
            authenticate_plain(msg, lookup)
    assert parse_plain(b"\x00u\x00p") == ("", "u", "p")
