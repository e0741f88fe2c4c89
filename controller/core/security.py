"""CreateAcls, DeleteAcls and AlterUserScramCredentials: the controller's decisions on security metadata.

Kafka's rules (``AclControlManager``, ``ScramControlManager``), which the tests cite:

* SA1. Each creation stands alone: an invalid binding (``acl.py`` A1, A2) fails with INVALID_REQUEST and the
  others still go in; a binding equal to an existing one writes nothing and succeeds (idempotent).
* SA2. Each filter of DeleteAcls removes every binding it matches and reports them; a binding matched by two
  filters is removed once; an invalid filter fails alone with INVALID_REQUEST.
* SA3. At most ``max_records`` records change per request (POLICY_VIOLATION beyond), so a broad filter
  cannot make an unbounded command.
* SU1. AlterUserScramCredentials is decided per user: a user named twice in one request fails with
  DUPLICATE_RESOURCE; an empty user name, a salt or salted password of the wrong size, or iterations
  outside [4096, 16384] with UNACCEPTABLE_CREDENTIAL; an unknown mechanism with UNSUPPORTED_SASL_MECHANISM;
  deleting a credential the user does not have with RESOURCE_NOT_FOUND. A user's changes go all or nothing.
* SU2. The request carries the salt and the salted password (KIP-554), never the password; the controller
  keeps StoredKey and ServerKey only (``scram.py`` S1).
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

from controller.core.common import ControllerResult, error, pack
from controller.security.convert import binding_from_pb, binding_to_pb, filter_from_pb
from controller.security.scram import credential_from_salted_password
from metadata.acl import AclBinding, AclError
from metadata.image import MetadataImage
from metadata.records import (
    AccessControlEntry,
    MetadataRecord,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
)
from metadata.scram import MECHANISM_BY_CODE, ScramError
from proto import security_pb2 as pb


def _new_id(rng: random.Random, taken: set[str]) -> str:
    while True:
        acl_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if acl_id not in taken:
            taken.add(acl_id)
            return acl_id


def create_acls(
    image: MetadataImage, request: pb.CreateAclsRequest, rng: random.Random, max_records: int
) -> ControllerResult[pb.CreateAclsResponse]:
    """CreateAcls (SA1, SA3)."""
    response = pb.CreateAclsResponse()
    if len(request.creations) > max_records:
        response.error.CopyFrom(error("POLICY_VIOLATION", f"More than {max_records} ACLs in one request"))
        return ControllerResult((), response)
    existing = set(image.acls.values())
    taken = set(image.acls)
    records: list[MetadataRecord] = []
    for creation in request.creations:
        result = response.results.add()
        try:
            binding = binding_from_pb(creation)
        except AclError as exc:
            result.CopyFrom(error("INVALID_REQUEST", str(exc)))
            continue
        if binding in existing:
            continue  # SA1: already there
        existing.add(binding)
        records.append(AccessControlEntry(_new_id(rng, taken), binding))
    return ControllerResult(pack([records], max_records) if records else (), response)


def delete_acls(
    image: MetadataImage, request: pb.DeleteAclsRequest, max_records: int
) -> ControllerResult[pb.DeleteAclsResponse]:
    """DeleteAcls (SA2, SA3)."""
    response = pb.DeleteAclsResponse()
    removed: dict[str, AclBinding] = {}
    for message in request.filters:
        result = response.results.add()
        try:
            acl_filter = filter_from_pb(message)
        except AclError as exc:
            result.error.CopyFrom(error("INVALID_REQUEST", str(exc)))
            continue
        for acl_id in sorted(image.acls):
            binding = image.acls[acl_id]
            if acl_filter.matches(binding):
                removed[acl_id] = binding
                result.deleted.append(binding_to_pb(binding))
    if len(removed) > max_records:
        refused = pb.DeleteAclsResponse()
        refused.error.CopyFrom(
            error("POLICY_VIOLATION", f"The filters match {len(removed)} ACLs, more than {max_records} at once")
        )
        return ControllerResult((), refused)
    records = [RemoveAccessControlEntry(acl_id) for acl_id in removed]
    return ControllerResult(pack([records], max_records) if records else (), response)


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _mechanism(code: int) -> str:
    name = MECHANISM_BY_CODE.get(code)
    if name is None:
        raise _Refused("UNSUPPORTED_SASL_MECHANISM", f"Unknown SCRAM mechanism code {code}")
    return name


def _user_records(
    image: MetadataImage,
    user: str,
    deletions: list[pb.AlterUserScramCredentialsRequest.Deletion],
    upsertions: list[pb.AlterUserScramCredentialsRequest.Upsertion],
) -> list[MetadataRecord]:
    """One user's records (SU1, SU2); raises ``_Refused``."""
    if not user:
        raise _Refused("UNACCEPTABLE_CREDENTIAL", "A user name must not be empty")
    mechanisms = [_mechanism(d.mechanism) for d in deletions] + [_mechanism(u.mechanism) for u in upsertions]
    if len(set(mechanisms)) != len(mechanisms):
        raise _Refused("DUPLICATE_RESOURCE", f"User {user!r} appears twice with one mechanism in the request")
    records: list[MetadataRecord] = []
    for deletion in deletions:
        mechanism = _mechanism(deletion.mechanism)
        if image.scram_credential(user, mechanism) is None:
            raise _Refused("RESOURCE_NOT_FOUND", f"User {user!r} has no {mechanism} credential")
        records.append(RemoveUserScramCredential(user, mechanism))
    for upsertion in upsertions:
        try:
            credential = credential_from_salted_password(
                _mechanism(upsertion.mechanism), upsertion.salted_password, upsertion.salt, upsertion.iterations
            )
        except ScramError as exc:
            raise _Refused("UNACCEPTABLE_CREDENTIAL", str(exc)) from None
        records.append(UserScramCredential(user, credential))
    return records


def alter_user_scram_credentials(
    image: MetadataImage, request: pb.AlterUserScramCredentialsRequest, max_records: int
) -> ControllerResult[pb.AlterUserScramCredentialsResponse]:
    """AlterUserScramCredentials (SU1, SU2): one result per user, in order of first appearance."""
    response = pb.AlterUserScramCredentialsResponse()
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    counts = Counter([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    if sum(counts.values()) > max_records:
        response.error.CopyFrom(error("POLICY_VIOLATION", f"More than {max_records} credential changes at once"))
        return ControllerResult((), response)
    groups: list[list[MetadataRecord]] = []
    for user in users:
        result = response.results.add(user=user)
        deletions = [d for d in request.deletions if d.name == user]
        upsertions = [u for u in request.upsertions if u.name == user]
        try:
            groups.append(_user_records(image, user, deletions, upsertions))
        except _Refused as exc:
            result.error.CopyFrom(error(exc.code, str(exc)))
    return ControllerResult(pack(groups, max_records), response)
