"""The controller's security decisions (``controller/core/security.py`` SA1-SA3, SU1-SU2), the security records
in the metadata image, and the client's enums against the cluster's."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

from controller.core import security
from controller.core.common import ControllerResult, preview
from controller.security.convert import binding_to_pb
from controller.security.scram import make_credential, password_matches
from metadata import acl as server_acl
from metadata.errors import MetadataError
from metadata.image import MetadataImage
from metadata.records import AccessControlEntry, RemoveAccessControlEntry, RemoveUserScramCredential
from odradek.security import acls as client_acl
from odradek.security.admin_calls import upsertion
from proto import security_pb2 as pb
from tests.metadata.strategies import replay_all

Op, Perm = server_acl.AclOperation, server_acl.AclPermissionType
Rt, Pt = server_acl.ResourceType, server_acl.PatternType


def binding(principal: str = "User:alice", op: server_acl.AclOperation = Op.READ, name: str = "orders",
            pattern: server_acl.PatternType = Pt.LITERAL, rtype: server_acl.ResourceType = Rt.TOPIC,
            perm: server_acl.AclPermissionType = Perm.ALLOW) -> server_acl.AclBinding:  # fmt: skip
    return server_acl.AclBinding(server_acl.ResourcePattern(rtype, name, pattern),
                                 server_acl.AccessControlEntry(principal, "*", op, perm))  # fmt: skip


def apply(image: MetadataImage, result: ControllerResult[Any]) -> MetadataImage:
    return preview(image, result.commands)


def test_sa1_creations_stand_alone_and_are_idempotent() -> None:
    rng = random.Random(1)
    good, bad = binding_to_pb(binding()), binding_to_pb(binding(op=Op.CLUSTER_ACTION))
    result = security.create_acls(MetadataImage(), pb.CreateAclsRequest(creations=[good, bad]), rng, 100)
    assert [r.code for r in result.response.results] == ["", "INVALID_REQUEST"]
    image = apply(MetadataImage(), result)
    assert list(image.acls.values()) == [binding()]
    again = security.create_acls(image, pb.CreateAclsRequest(creations=[good, good]), rng, 100)
    assert again.commands == ()
    assert [r.code for r in again.response.results] == ["", ""]
    unknown = pb.AclBinding(resource_type=99, resource_name="x", pattern_type=3, principal="User:a", host="*",
                            operation=3, permission_type=3)  # fmt: skip
    refused = security.create_acls(image, pb.CreateAclsRequest(creations=[unknown]), rng, 100)
    assert refused.response.results[0].code == "INVALID_REQUEST"
    assert refused.commands == ()


def test_sa2_sa3_delete_by_filters() -> None:
    rng = random.Random(2)
    wanted = [binding(), binding(op=Op.WRITE), binding("User:bob", Op.WRITE, "ord", Pt.PREFIXED, perm=Perm.DENY),
              binding(rtype=Rt.GROUP, name="g")]  # fmt: skip
    image = apply(MetadataImage(), security.create_acls(
        MetadataImage(), pb.CreateAclsRequest(creations=[binding_to_pb(b) for b in wanted]), rng, 100))  # fmt: skip
    alice_topic = pb.AclFilter(resource_type=Rt.TOPIC, pattern_type=Pt.ANY, principal="User:alice", operation=Op.ANY,
                               permission_type=Perm.ANY)  # fmt: skip
    reads = pb.AclFilter(resource_type=Rt.ANY, pattern_type=Pt.ANY, operation=Op.READ, permission_type=Perm.ANY)
    bad = pb.AclFilter(resource_type=Rt.ANY, pattern_type=Pt.MATCH, operation=Op.ANY, permission_type=Perm.ANY)
    result = security.delete_acls(image, pb.DeleteAclsRequest(filters=[alice_topic, reads, bad]), 100)
    assert len(result.response.results[0].deleted) == 2
    assert len(result.response.results[1].deleted) == 2  # READ of alice and the group's READ
    assert result.response.results[2].error.code == "INVALID_REQUEST"
    assert len(result.records) == 3  # alice's READ matched twice, removed once
    after = apply(image, result)
    assert set(after.acls.values()) == {binding("User:bob", Op.WRITE, "ord", Pt.PREFIXED, perm=Perm.DENY)}
    everything = pb.AclFilter(resource_type=Rt.ANY, pattern_type=Pt.ANY, operation=Op.ANY, permission_type=Perm.ANY)
    limited = security.delete_acls(image, pb.DeleteAclsRequest(filters=[everything]), 3)
    assert limited.response.error.code == "POLICY_VIOLATION"
    assert limited.commands == ()


def test_su1_su2_scram_changes() -> None:
    upsert = upsertion("alice", "SCRAM-SHA-256", "pw", 4096, salt=b"salt")
    result = security.alter_user_scram_credentials(
        MetadataImage(), pb.AlterUserScramCredentialsRequest(upsertions=[upsert]), 100
    )
    assert [r.error.code for r in result.response.results] == [""]
    image = apply(MetadataImage(), result)
    cred = image.scram_credential("alice", "SCRAM-SHA-256")
    assert cred == make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)  # SU2: the same keys as from the password
    assert cred is not None
    assert password_matches(cred, "pw")
    assert not password_matches(cred, "other")

    short = pb.AlterUserScramCredentialsRequest.Upsertion(name="bob", mechanism=1, iterations=4096, salt=b"s",
                                                          salted_password=b"x" * 5)  # fmt: skip
    few = upsertion("carol", "SCRAM-SHA-512", "pw", 4096)
    few.iterations = 10
    unknown = pb.AlterUserScramCredentialsRequest.Upsertion(name="dan", mechanism=7, iterations=4096, salt=b"s",
                                                            salted_password=hashlib.sha256(b"x").digest())
    request = pb.AlterUserScramCredentialsRequest(
        upsertions=[short, few, unknown, upsertion("", "SCRAM-SHA-256", "pw", 4096),
                    upsertion("eve", "SCRAM-SHA-256", "pw", 4096), upsertion("eve", "SCRAM-SHA-256", "pw2", 4096)],
        deletions=[pb.AlterUserScramCredentialsRequest.Deletion(name="alice", mechanism=2)],
    )  # fmt: skip
    refused = security.alter_user_scram_credentials(image, request, 100)
    codes = {r.user: r.error.code for r in refused.response.results}
    assert codes == {
        "alice": "RESOURCE_NOT_FOUND", "bob": "UNACCEPTABLE_CREDENTIAL", "carol": "UNACCEPTABLE_CREDENTIAL",
        "dan": "UNSUPPORTED_SASL_MECHANISM", "": "UNACCEPTABLE_CREDENTIAL", "eve": "DUPLICATE_RESOURCE",
    }  # fmt: skip
    assert refused.commands == ()
    delete = pb.AlterUserScramCredentialsRequest(
        deletions=[pb.AlterUserScramCredentialsRequest.Deletion(name="alice", mechanism=1)])
    gone = apply(image, security.alter_user_scram_credentials(image, delete, 100))
    assert "alice" not in gone.scram_credentials


def test_image_refuses_inconsistent_security_records() -> None:
    acl_id = "00000000-0000-4000-8000-000000000001"
    image = replay_all([AccessControlEntry(acl_id, binding())])
    with pytest.raises(MetadataError, match="exists"):
        replay_all([AccessControlEntry(acl_id, binding(op=Op.WRITE))], image)
    with pytest.raises(MetadataError, match="no ACL"):
        replay_all([RemoveAccessControlEntry("00000000-0000-4000-8000-000000000002")], image)
    with pytest.raises(MetadataError, match="no SCRAM-SHA-256 credential"):
        replay_all([RemoveUserScramCredential("alice", "SCRAM-SHA-256")], image)
    assert replay_all([RemoveAccessControlEntry(acl_id)], image).acls == {}


def test_clients_and_cluster_share_one_definition_of_the_acl_codes() -> None:
    """One definition (common/acls.py): a code can never mean one thing to a client and another to the cluster."""
    for client_enum, server_enum in ((client_acl.ResourceType, server_acl.ResourceType),
                                     (client_acl.PatternType, server_acl.PatternType),
                                     (client_acl.AclOperation, server_acl.AclOperation),
                                     (client_acl.AclPermissionType, server_acl.AclPermissionType)):  # fmt: skip
        assert client_enum is server_enum
    assert server_acl.CLUSTER_RESOURCE_NAME == "kafka-cluster"
    assert int(server_acl.AclOperation.IDEMPOTENT_WRITE) == 12  # Kafka's code
