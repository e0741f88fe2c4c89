"""Security of the Kafka-protocol listener: TLS, SaslHandshake (17) and SaslAuthenticate (36), and the authorizer.

The listener's protocol comes from ``listener.security.protocol.map`` like every other listener's
(``controller/security/settings.py``). On SSL and SASL_SSL listeners each accepted socket is wrapped in TLS on
its connection thread (the handshake, bounded by ``connections.max.idle.ms``, never blocks the acceptor), with
the node's keystore and, when client certificates are required, its truststore; ``sendfile`` is off there
(record bytes must go through TLS). The principal is set once per connection, as Kafka does:

* PLAINTEXT: ``User:ANONYMOUS``; SSL: the client certificate's DN through ``ssl.principal.mapping.rules``
  (``User:ANONYMOUS`` without one);
* SASL_*: nothing but ApiVersions, SaslHandshake and SaslAuthenticate until the SASL exchange succeeds (PLAIN only
  over SASL_SSL; SCRAM-SHA-256/512 against the credentials in the metadata image), then ``User:<name>``.
  SaslHandshake v0 (raw SASL tokens without Kafka framing) is not offered: clients use v1.

With an authorizer, every request is checked before its handler runs by the same rules as the gRPC listeners
(:data:`KAFKA_RULES`, built from ``controller/security/rules.py``'s checks); a refused Produce, Fetch,
ListOffsets or OffsetCommit answers each partition with the error, a refused call with a top-level error code
answers that, and any other refused call closes the connection (nothing changes in every case). Metadata and
ListGroups answers leave out what the principal may not DESCRIBE.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from broker.kafka.api import Request, Session
from broker.kafka.codec import _fields, build, response_class
from controller.security.plain import MECHANISM as PLAIN
from controller.security.principal_rules import PrincipalMappingError
from controller.security.rules import Check, Denial
from metadata.acl import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType
from metadata.scram import ScramError

logger = logging.getLogger(__name__)

Op, Rt = AclOperation, ResourceType
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
ANONYMOUS = "User:ANONYMOUS"


# ------------------------------------------------------------------------------------------------ TLS


def server_context(
    key_pem: bytes, cert_chain_pem: bytes, truststore_pem: bytes | None, require: bool
) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2+) from PEM material (loaded through files ``ssl`` needs, then removed)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.NamedTemporaryFile() as keystore:
        keystore.write(key_pem + cert_chain_pem)
        keystore.flush()
        context.load_cert_chain(keystore.name)
    if require:
        assert truststore_pem is not None
        context.load_verify_locations(cadata=truststore_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def listener_context(settings: Any, name: str) -> ssl.SSLContext:
    """The TLS server context of listener ``name`` from the node's settings
    (:class:`~controller.security.settings.NodeSecurity`): its keystore, and client certificates required when
    ``ssl.client.auth`` (or ``listener.name.<name>.ssl.client.auth``) says so."""
    settings.check_listener(name)
    assert settings.key_pem is not None
    assert settings.cert_chain_pem is not None
    required = settings.client_auth_by_listener.get(name.upper(), settings.client_auth_required)
    return server_context(settings.key_pem, settings.cert_chain_pem, settings.truststore_pem, required)


def certificate_principal(sock: ssl.SSLSocket, mapper: Any) -> str:
    der = sock.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    from cryptography import x509

    dn = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    try:
        return "User:" + str(mapper.principal_name(dn))
    except PrincipalMappingError as exc:
        raise ssl.SSLError(str(exc)) from None


def secure_socket(sock: socket.socket, context: ssl.SSLContext, timeout_s: float) -> ssl.SSLSocket:
    """TLS on an accepted socket, the handshake done within ``timeout_s`` (raises on failure)."""
    sock.settimeout(timeout_s)
    wrapped = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    wrapped.do_handshake()
    return wrapped


# ------------------------------------------------------------------------------------------------ SASL


def _sasl_refusal(request: Request, mechanism: str) -> tuple[str, str] | None:
    protocol = request.session.extra.get("protocol", "PLAINTEXT")
    guard = request.ctx.guard
    if not protocol.startswith("SASL_") or guard is None:
        return "ILLEGAL_SASL_STATE", f"listener {request.session.listener} is {protocol}: it does not take SASL"
    enabled = [m for m in guard.authority.mechanisms if m != PLAIN or protocol == "SASL_SSL"]
    if mechanism not in enabled:
        return "UNSUPPORTED_SASL_MECHANISM", f"SASL mechanism {mechanism!r} is not enabled ({', '.join(enabled)})"
    return None


def handle_sasl_handshake(request: Request) -> Any:
    mechanism = request.body.mechanism
    refusal = _sasl_refusal(request, mechanism)
    guard = request.ctx.guard
    enabled = list(guard.authority.mechanisms) if guard is not None else []
    if refusal is None:
        request.session.extra["sasl_mechanism"] = mechanism
    return build(response_class(SASL_HANDSHAKE, request.version), error_code=refusal[0] if refusal else 0,
                 mechanisms=enabled)  # fmt: skip


def handle_sasl_authenticate(request: Request) -> Any:
    session = request.session
    mechanism = session.extra.get("sasl_mechanism", "")
    cls = response_class(SASL_AUTHENTICATE, request.version)

    def answer(code: str | int, message: str | None, data: bytes = b"") -> Any:
        return build(cls, error_code=code, error_message=message, auth_bytes=data, session_lifetime=0)

    if session.authenticated or not mechanism:
        return answer("ILLEGAL_SASL_STATE", "SaslAuthenticate without a SaslHandshake, or after authentication")
    authority = request.ctx.guard.authority
    message = bytes(request.body.auth_bytes)
    try:
        if mechanism == PLAIN:
            user = authority.plain(message)
        elif "scram" not in session.extra:
            exchange = authority.scram_first(mechanism, message)
            session.extra["scram"] = exchange
            return answer(0, None, exchange.server_first.encode())
        else:
            exchange = session.extra.pop("scram")
            final = authority.scram_final(exchange, message)
            session.principal, session.authenticated = f"User:{exchange.username}", True
            return answer(0, None, final)
    except ScramError as exc:
        session.extra.pop("scram", None)
        return answer(exc.code, str(exc))
    session.principal, session.authenticated = f"User:{user}", True
    return answer(0, None)


# ------------------------------------------------------------------------------------------ authorization


def _names(items: Iterable[Any] | None, attribute: str) -> list[str]:
    return [getattr(i, attribute) for i in items or () if getattr(i, attribute, None) is not None]


def _topics(op: AclOperation, attribute: str = "topics", field: str = "name") -> Callable[[Any, Check], Denial | None]:
    return lambda body, check: check.need(op, Rt.TOPIC, _names(getattr(body, attribute), field))


def _replica(op: AclOperation, attribute: str, field: str) -> Callable[[Any, Check], Denial | None]:
    def rule(body: Any, check: Check) -> Denial | None:
        if getattr(body, "replica_id", -1) >= 0:
            return check.cluster(Op.CLUSTER_ACTION)
        return check.need(op, Rt.TOPIC, _names(getattr(body, attribute), field))

    return rule


def _group(op: AclOperation) -> Callable[[Any, Check], Denial | None]:
    return lambda body, check: check.need(op, Rt.GROUP, [body.group_id])


def _produce(body: Any, check: Check) -> Denial | None:
    if body.transactional_id:
        denial = check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [body.transactional_id])
        if denial is not None:
            return denial
    return check.need(Op.WRITE, Rt.TOPIC, _names(body.topic_data, "name"))


def _offset_commit(body: Any, check: Check) -> Denial | None:
    return check.need(Op.READ, Rt.GROUP, [body.group_id]) or check.need(Op.READ, Rt.TOPIC, _names(body.topics, "name"))


def _offset_fetch(body: Any, check: Check) -> Denial | None:
    groups = [(g.group_id, g.topics) for g in body.groups] if hasattr(body, "groups") else [(body.group_id,
                                                                                             body.topics)]
    for group_id, topics in groups:
        denial = check.need(Op.DESCRIBE, Rt.GROUP, [group_id]) or check.need(Op.DESCRIBE, Rt.TOPIC,
                                                                             _names(topics, "name"))
        if denial is not None:
            return denial
    return None


def _find_coordinator(body: Any, check: Check) -> Denial | None:
    keys = list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]
    return check.need(Op.DESCRIBE, Rt.TRANSACTIONAL_ID if body.key_type == 1 else Rt.GROUP, keys)


def _init_producer_id(body: Any, check: Check) -> Denial | None:
    if body.transactional_id:
        return check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [body.transactional_id])
    if check.allowed(Op.IDEMPOTENT_WRITE, Rt.CLUSTER):
        return None
    if check.authorizer.authorize_any(check.principal, check.host, Op.WRITE, Rt.TOPIC):
        return None
    return check.cluster(Op.IDEMPOTENT_WRITE)


def _configs(op: AclOperation) -> Callable[[Any, Check], Denial | None]:
    def rule(body: Any, check: Check) -> Denial | None:
        for resource in body.resources:
            denial = (check.need(op, Rt.TOPIC, [resource.resource_name]) if int(resource.resource_type) == 2
                      else check.cluster(op))  # fmt: skip
            if denial is not None:
                return denial
        return None

    return rule


def _create_topics(body: Any, check: Check) -> Denial | None:
    if check.allowed(Op.CREATE, Rt.CLUSTER):
        return None
    return check.need(Op.CREATE, Rt.TOPIC, _names(body.topics, "name"))


def _delete_topics(body: Any, check: Check) -> Denial | None:
    names = list(body.topic_names) if hasattr(body, "topic_names") else _names(body.topics, "name")
    return check.need(Op.DELETE, Rt.TOPIC, names)


def _none(body: Any, check: Check) -> Denial | None:
    return None


def _txn(body: Any, check: Check, name: str = "transactional_id") -> Denial | None:
    return check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [getattr(body, name)])


def _add_partitions_to_txn(body: Any, check: Check) -> Denial | None:
    """v0-v3 (kio's ``v3_and_below_*`` fields): WRITE on the transactional id and on each topic."""
    denial = _txn(body, check, "v3_and_below_transactional_id")
    return denial or check.need(Op.WRITE, Rt.TOPIC, [t.name for t in body.v3_and_below_topics])


def _txn_offset_commit(body: Any, check: Check) -> Denial | None:
    return _txn(body, check) or check.need(Op.READ, Rt.GROUP, [body.group_id]) or check.need(
        Op.READ, Rt.TOPIC, [t.name for t in body.topics])  # fmt: skip


KAFKA_RULES: dict[int, Callable[[Any, Check], Denial | None]] = {
    0: _produce,
    1: _replica(Op.READ, "topics", "topic"),
    2: _replica(Op.DESCRIBE, "topics", "name"),
    3: _none,  # Metadata: filtered (filter_metadata)
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group(Op.READ),
    12: _group(Op.READ),
    13: _group(Op.READ),
    14: _group(Op.READ),
    15: lambda body, check: check.need(Op.DESCRIBE, Rt.GROUP, list(body.groups)),
    16: _none,  # ListGroups: filtered
    19: _create_topics,
    20: _delete_topics,
    22: _init_producer_id,
    23: _replica(Op.DESCRIBE, "topics", "topic"),
    32: _configs(Op.DESCRIBE_CONFIGS),
    37: _topics(Op.ALTER),
    42: lambda body, check: check.need(Op.DELETE, Rt.GROUP, list(body.groups_names)),
    44: _configs(Op.ALTER_CONFIGS),
    60: _none,
    68: _group(Op.READ),
    69: lambda body, check: check.need(Op.DESCRIBE, Rt.GROUP, list(body.group_ids)),
    # transactions (docs/TRANSACTIONS.md), as the gRPC rules
    24: _add_partitions_to_txn,
    25: lambda body, check: _txn(body, check) or check.need(Op.READ, Rt.GROUP, [body.group_id]),
    26: _txn,
    28: _txn_offset_commit,
    65: lambda body, check: check.need(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, list(body.transactional_ids)),
    66: _none,  # ListTransactions: filtered by DESCRIBE on each transactional id (filter_transactions)
}


def check_of(request: Request) -> Check | None:
    """The caller's Check on this broker's current ACLs (None: no authorizer configured)."""
    guard = request.ctx.guard
    if guard is None or guard.authorizer is None:
        return None
    return Check(guard.authorizer.current(), request.session.principal, request.session.client_host)


def _default(kafka_type: str, nullable: bool, name: str) -> Any:
    if nullable:
        return None
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type.startswith(("int", "uint", "timedelta", "float")):
        return -1 if name.endswith(("_id", "epoch", "generation_id", "leader", "offset")) else 0
    return None


def _entity(cls: type, code: str, message: str, mirror: dict[str, Any]) -> Any:
    values: dict[str, Any] = {}
    for name, f in _fields(cls).items():
        if name == "error_code":
            values[name] = code
        elif name == "error_message":
            values[name] = message
        elif name in mirror:
            values[name] = mirror[name]
        elif f.nested is not None:
            values[name] = []
        elif f.required:
            values[name] = _default(f.kafka_type, f.nullable, name)
    return build(cls, **values)


def refusal(request: Request, denial: Denial) -> Any | None:
    """The answer to a refused request (the module docstring), or None: close the connection."""
    key, version, body = request.api_key, request.version, request.body
    cls = response_class(key, version)

    def per_partition(topics: Iterable[Any], topic_field: str, partitions: str, index: str, out_topic: str,
                      out_partitions: str, out_index: str) -> list[dict[str, Any]]:  # fmt: skip
        nested = _fields(cls)[_list_field(cls)].nested
        partition_cls = _fields(nested)[out_partitions].nested
        return [{out_topic: getattr(t, topic_field), out_partitions: [
            dataclasses.asdict(_entity(partition_cls, denial.code, denial.message, {out_index: getattr(p, index)}))
            for p in getattr(t, partitions)]} for t in topics]  # fmt: skip

    if key == 0:
        return build(cls, throttle_time=0, responses=per_partition(body.topic_data, "name", "partition_data", "index",
                                                                   "name", "partition_responses", "index"))
    if key == 1:
        return _entity(cls, "NONE", "", {"responses": per_partition(
            body.topics, "topic", "partitions", "partition", "topic", "partitions", "partition_index"),
            "session_id": 0})  # fmt: skip
    if key == 2:
        return build(cls, throttle_time=0, topics=per_partition(body.topics, "name", "partitions", "partition_index",
                                                                "name", "partitions", "partition_index"))
    if key == 8:
        return build(cls, throttle_time=0, topics=per_partition(body.topics, "name", "partitions", "partition_index",
                                                                "name", "partitions", "partition_index"))
    if "error_code" in _fields(cls):
        return _entity(cls, denial.code, denial.message, {})
    if key == 10:
        return build(cls, throttle_time=0, coordinators=[dict(key=k, node_id=-1, host="", port=-1,
                                                              error_code=denial.code, error_message=denial.message)
                                                         for k in body.coordinator_keys])  # fmt: skip
    return None


def _list_field(cls: type) -> str:
    return next(name for name, f in _fields(cls).items() if f.nested is not None)


def filter_topics(response: Any, check: Check, requested: Iterable[str]) -> Any:
    """Metadata: the topics ``check`` may DESCRIBE; a topic asked for by name otherwise answers
    TOPIC_AUTHORIZATION_FAILED (``rules.py`` R5)."""
    asked = set(requested)
    kept = []
    for topic in response.topics:
        if topic.name is None or check.allowed(Op.DESCRIBE, Rt.TOPIC, topic.name):
            kept.append(topic)
        elif topic.name in asked:
            kept.append(dataclasses.replace(topic, error_code=_code("TOPIC_AUTHORIZATION_FAILED"), partitions=()))
    return dataclasses.replace(response, topics=tuple(kept))


def filter_groups(response: Any, check: Check) -> Any:
    if check.allowed(Op.DESCRIBE, Rt.CLUSTER, CLUSTER_RESOURCE_NAME):
        return response
    return dataclasses.replace(
        response, groups=tuple(g for g in response.groups if check.allowed(Op.DESCRIBE, Rt.GROUP, g.group_id))
    )


def filter_transactions(response: Any, check: Check) -> Any:
    """ListTransactions: the transactional ids ``check`` may DESCRIBE, as Kafka's broker and the gRPC listener
    (``controller.security.rules.filter_transactions``) answer; no cluster permission is needed."""
    return dataclasses.replace(response, transaction_states=tuple(
        t for t in response.transaction_states
        if check.allowed(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t.transactional_id)))  # fmt: skip


def _code(name: str) -> Any:
    from broker.kafka.codec import error_code

    return error_code(name)


def open_session(session: Session, protocol: str) -> None:
    """A new connection's starting state for its listener's protocol."""
    session.extra["protocol"] = protocol
    if protocol.startswith("SASL_"):
        session.authenticated = False
