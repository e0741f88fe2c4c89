"""The Admin client's security calls: ACLs (Kafka's ``createAcls``, ``deleteAcls``, ``describeAcls``) and SCRAM
credentials (``alterUserScramCredentials``, ``describeUserScramCredentials``).

Changes go through any broker to the active controller (the Admin's ``forwarded`` call, which retries
NOT_CONTROLLER); describes are answered by one broker from its metadata image. A SCRAM upsert sends the salt
and the salted password, computed here with a fresh random salt (KIP-554): the password never leaves the
client.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.errors import error_from_code
from odradek.security.acls import AclBinding, AclBindingFilter
from odradek.security.scram import MECHANISMS, MIN_ITERATIONS
from proto import security_pb2 as pb

MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
DEFAULT_ITERATIONS = 8192  # kafka-configs' default for SCRAM credentials (the minimum is 4096)
SALT_BYTES = 32

Forwarded = Callable[[str, Any], Any]
Call = Callable[[str, Any], Any]


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """What the cluster tells of a credential: its mechanism and iteration count (never salt or keys)."""

    mechanism: str
    iterations: int


def _raise(code: str, message: str) -> None:
    if code:
        raise error_from_code(code, message or code)


def create_acls(forwarded: Forwarded, bindings: Iterable[AclBinding]) -> None:
    """Creates every binding; raises the first failure's error naming every failure."""
    items = list(bindings)
    response = forwarded("CreateAcls", pb.CreateAclsRequest(creations=[b.to_pb() for b in items]))
    failures = [(b, r) for b, r in zip(items, response.results, strict=True) if r.code]
    if failures:
        text = "; ".join(f"{b.resource_type.name} {b.name!r} {b}: {r.message or r.code}" for b, r in failures)
        _raise(failures[0][1].code, f"could not create {len(failures)} ACL(s): {text}")


def delete_acls(forwarded: Forwarded, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
    """Deletes every ACL the filters match; returns them."""
    response = forwarded("DeleteAcls", pb.DeleteAclsRequest(filters=[f.to_pb() for f in filters]))
    deleted: list[AclBinding] = []
    for result in response.results:
        _raise(result.error.code, f"DeleteAcls: {result.error.message}")
        deleted.extend(AclBinding.from_pb(b) for b in result.deleted)
    return list(dict.fromkeys(deleted))


def describe_acls(call: Call, acl_filter: AclBindingFilter) -> list[AclBinding]:
    response = call("DescribeAcls", pb.DescribeAclsRequest(filter=acl_filter.to_pb()))
    _raise(response.error.code, f"DescribeAcls: {response.error.message}")
    return [AclBinding.from_pb(b) for b in response.acls]


def upsertion(
    name: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> pb.AlterUserScramCredentialsRequest.Upsertion:
    """The upsertion for ``password``: salted here, with a random salt unless one is given."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)
    return pb.AlterUserScramCredentialsRequest.Upsertion(
        name=name, mechanism=MECHANISM_CODES[mechanism], iterations=iterations, salt=salt, salted_password=salted
    )


def alter_user_scram_credentials(
    forwarded: Forwarded,
    upsertions: Iterable[pb.AlterUserScramCredentialsRequest.Upsertion] = (),
    deletions: Iterable[tuple[str, str]] = (),
) -> None:
    """Applies the changes; raises the first user's error naming every failure."""
    request = pb.AlterUserScramCredentialsRequest(
        upsertions=list(upsertions),
        deletions=[
            pb.AlterUserScramCredentialsRequest.Deletion(name=n, mechanism=MECHANISM_CODES.get(m, 0))
            for n, m in deletions
        ],
    )
    response = forwarded("AlterUserScramCredentials", request)
    failures = [r for r in response.results if r.error.code]
    if failures:
        text = "; ".join(f"{r.user!r}: {r.error.message or r.error.code}" for r in failures)
        _raise(failures[0].error.code, text)


def describe_user_scram_credentials(call: Call, users: Iterable[str] = ()) -> dict[str, list[ScramCredentialInfo]]:
    """user -> credentials; a named user without any raises ResourceNotFoundError."""
    response = call("DescribeUserScramCredentials", pb.DescribeUserScramCredentialsRequest(users=list(users)))
    _raise(response.error.code, f"DescribeUserScramCredentials: {response.error.message}")
    names = {code: name for name, code in MECHANISM_CODES.items()}
    out: dict[str, list[ScramCredentialInfo]] = {}
    for result in response.results:
        _raise(result.error.code, result.error.message)
        out[result.user] = [
            ScramCredentialInfo(names.get(c.mechanism, str(c.mechanism)), c.iterations) for c in result.credentials
        ]
    return out
