"""ACLs and SCRAM credentials: CreateAcls, DeleteAcls and AlterUserScramCredentials are forwarded to the active
controller (their answer is the controller's); DescribeAcls and DescribeUserScramCredentials are answered from
this broker's metadata image, as Kafka's brokers answer them from their authorizer and metadata cache.

After a change succeeds the broker waits (bounded, as for topic changes in :mod:`broker.handlers.forward`)
until its own image shows it, so that the next describe on this broker sees the change.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.handlers.forward import await_image, forward_call
from controller.security.convert import binding_from_pb, binding_to_pb, filter_from_pb
from metadata.acl import AclError
from metadata.image import MetadataImage
from metadata.scram import MECHANISMS
from proto import security_pb2 as pb

ADMIN_TIMEOUT_MS = 30_000


def create_acls(ctx: BrokerContext, request: pb.CreateAclsRequest) -> pb.CreateAclsResponse:
    response = forward_call(ctx, "CreateAcls", request, pb.CreateAclsResponse, 0)
    if response.error.code:
        return response
    created = []
    for creation, result in zip(request.creations, response.results, strict=False):
        if not result.code:
            try:
                created.append(binding_from_pb(creation))
            except AclError:
                continue
    if created:
        await_image(ctx, lambda image: all(b in set(image.acls.values()) for b in created), ADMIN_TIMEOUT_MS)
    return response


def delete_acls(ctx: BrokerContext, request: pb.DeleteAclsRequest) -> pb.DeleteAclsResponse:
    response = forward_call(ctx, "DeleteAcls", request, pb.DeleteAclsResponse, 0)
    if response.error.code:
        return response
    gone = []
    for result in response.results:
        for deleted in result.deleted:
            try:
                gone.append(binding_from_pb(deleted))
            except AclError:
                continue
    if gone:
        await_image(ctx, lambda image: not set(gone) & set(image.acls.values()), ADMIN_TIMEOUT_MS)
    return response


def alter_user_scram_credentials(
    ctx: BrokerContext, request: pb.AlterUserScramCredentialsRequest
) -> pb.AlterUserScramCredentialsResponse:
    response = forward_call(ctx, "AlterUserScramCredentials", request, pb.AlterUserScramCredentialsResponse, 0)
    if response.error.code:
        return response
    ok = {r.user for r in response.results if not r.error.code}
    by_code = {code: name for name, (_, code) in MECHANISMS.items()}
    upserted = {(u.name, by_code.get(u.mechanism), u.iterations, u.salt) for u in request.upsertions if u.name in ok}
    deleted = {(d.name, by_code.get(d.mechanism)) for d in request.deletions if d.name in ok}

    def visible(image: MetadataImage) -> bool:
        for name, mechanism, iterations, salt in upserted:
            cred = image.scram_credential(name, mechanism or "")
            if cred is None or cred.salt != salt or cred.iterations != iterations:
                return False
        return all(image.scram_credential(name, mechanism or "") is None for name, mechanism in deleted)

    if upserted or deleted:
        await_image(ctx, visible, ADMIN_TIMEOUT_MS)
    return response


def describe_acls(ctx: BrokerContext, request: pb.DescribeAclsRequest) -> pb.DescribeAclsResponse:
    response = pb.DescribeAclsResponse()
    try:
        acl_filter = filter_from_pb(request.filter)
    except AclError as exc:
        response.error.code, response.error.message = "INVALID_REQUEST", str(exc)
        return response
    image = ctx.metadata.image
    for acl_id in sorted(image.acls):
        if acl_filter.matches(image.acls[acl_id]):
            response.acls.append(binding_to_pb(image.acls[acl_id]))
    return response


def describe_user_scram_credentials(
    ctx: BrokerContext, request: pb.DescribeUserScramCredentialsRequest
) -> pb.DescribeUserScramCredentialsResponse:
    """Mechanisms and iterations per user, never salts or keys; a named user without any: RESOURCE_NOT_FOUND."""
    response = pb.DescribeUserScramCredentialsResponse()
    image = ctx.metadata.image
    users = list(dict.fromkeys(request.users)) if request.users else sorted(image.scram_credentials)
    for user in users:
        result = response.results.add(user=user)
        creds = image.scram_credentials.get(user)
        if not creds:
            result.error.code, result.error.message = "RESOURCE_NOT_FOUND", f"User {user!r} has no SCRAM credential"
            continue
        for mechanism in sorted(creds):
            result.credentials.add(mechanism=MECHANISMS[mechanism][1], iterations=creds[mechanism].iterations)
    return response
