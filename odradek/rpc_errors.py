"""gRPC failures mapped to Kafka's errors (:func:`rpc_error`), for every call the clients make."""

from __future__ import annotations

import grpc

from common.streams import StreamEnded
from odradek.errors import (
    InvalidRequestError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NetworkError,
    UnknownKafkaError,
    UnsupportedVersionError,
    error_from_code,
)

REAUTHENTICATE = "odradek-reauthenticate"  # trailing metadata of a refusal: the node no longer knows the session


def _security_error(exc: grpc.RpcError, code: grpc.StatusCode, details: str, what: str, address: str) -> KafkaError:
    """A node's refusal (``controller/security/interceptor.py``): details ``"CODE: message"``; a session the node
    no longer knows is retriable (the SASL client authenticates again, CS2)."""
    trailing = exc.trailing_metadata() if isinstance(exc, grpc.Call) else None
    if any(k == REAUTHENTICATE for k, _ in trailing or ()):
        return NetworkError(f"{what} to {address}: the SASL session ended ({details}); authenticating again")
    kafka_code, sep, message = details.partition(": ")
    if sep and kafka_code.isupper():
        return error_from_code(kafka_code, f"{what} to {address}: {message}")
    name = "SASL_AUTHENTICATION_FAILED" if code is grpc.StatusCode.UNAUTHENTICATED else "CLUSTER_AUTHORIZATION_FAILED"
    return error_from_code(name, f"{what} to {address}: {details}")


def rpc_error(exc: grpc.RpcError, what: str, address: str) -> KafkaError:
    """The Kafka error for a failed gRPC call ``what`` (e.g. "Produce") to ``address``."""
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    text = f"{what} to {address} failed: {details}"
    if isinstance(exc, StreamEnded):  # the broker ended the stream the call was on: as a lost connection
        return NetworkError(text)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return _security_error(exc, code, details, what, address)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED):
        return NetworkError(text)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KafkaTimeoutError(f"{what} to {address} timed out")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return UnsupportedVersionError(f"the broker at {address} does not implement {what}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return MessageTooLargeError(text)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(text)
    return UnknownKafkaError(f"{text} ({code.name if code else 'no status'})")
