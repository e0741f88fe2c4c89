"""Authentication and authorization of every gRPC call: a ``grpc.aio`` server interceptor per listener.

For each call, before its handler runs:

1. **Who** (docs/SECURITY.md section 2), by the listener's protocol:
   PLAINTEXT ``User:ANONYMOUS``; SSL the client certificate's DN through ``ssl.principal.mapping.rules``
   (``User:ANONYMOUS`` without one); SASL_* the session token of ``authorization: Bearer <token>``, else (SASL_SSL
   with a verified client certificate) the certificate's principal, else the call is refused UNAUTHENTICATED.
2. **May it**, when an authorizer is configured: the RPC's rule (``rules.py`` R1-R5) against the ACLs of the
   node's current metadata image, refused PERMISSION_DENIED before the handler runs, so a refused call
   changes nothing. Metadata and ListGroups answers are filtered after the handler (R5).

A refusal's status details are ``"<KAFKA_ERROR_CODE>: <message>"``; a call whose session token is expired or
unknown to this node (it restarted) also carries the trailing metadata ``odradek-reauthenticate: 1``, which
tells the client to authenticate again and retry (T2). The Sasl service and the gRPC health service are
open to every caller: they are how a principal is made and how orchestrators probe.

Thread-safety: the interceptor is immutable; the authorizer it reads is replaced whole (one attribute write)
when the ACLs of the image change.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import grpc.aio

from controller.security.authorizer import Authorizer
from controller.security.principal_rules import PrincipalMapper, PrincipalMappingError
from controller.security.rules import Check, Rule, filter_groups, filter_metadata, filter_transactions
from controller.security.token import TokenError, TokenSigner
from metadata.image import MetadataImage

ANONYMOUS = "User:ANONYMOUS"
REAUTHENTICATE = "odradek-reauthenticate"
OPEN_SERVICES = ("/odradek.security.Sasl/", "/grpc.health.v1.Health/")


class AuthorizerCache:
    """The authorizer of the current image's ACLs, rebuilt only when they change. Thread-safe (one tuple swap)."""

    def __init__(self, image: Callable[[], MetadataImage], template: Authorizer) -> None:
        self._image = image
        self._state: tuple[Any, Authorizer] = (None, template)

    def current(self) -> Authorizer:
        acls = self._image().acls
        seen, authorizer = self._state
        if acls is not seen:
            authorizer = authorizer.with_bindings(acls.values())
            self._state = (acls, authorizer)
        return authorizer


def peer_host(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``; ``ipv6:[::1]:5000`` -> ``::1``."""
    _, _, address = peer.partition(":")
    host, _, _ = address.rpartition(":")
    return host.strip("[]") or peer


class Refused(Exception):
    def __init__(self, status: grpc.StatusCode, code: str, message: str, reauthenticate: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.reauthenticate = status, code, reauthenticate


class CallSecurity:
    """Steps 1 and 2 of the module docstring for one listener."""

    def __init__(
        self, protocol: str, mapper: PrincipalMapper, signer: TokenSigner | None,
        authorizer: AuthorizerCache | None, rules: Mapping[str, Rule],
    ) -> None:  # fmt: skip
        self.protocol = protocol
        self.mapper = mapper
        self.signer = signer
        self.authorizer = authorizer  # None: no authorizer configured, every authenticated call is allowed
        self.rules = rules

    def _certificate_principal(self, context: Any) -> str | None:
        subjects = context.auth_context().get("x509_subject")
        if not subjects:
            return None
        dn = subjects[0].decode("utf-8", "replace")
        try:
            return "User:" + self.mapper.principal_name(dn)
        except PrincipalMappingError as exc:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "SASL_AUTHENTICATION_FAILED", str(exc)) from None

    def principal(self, context: Any) -> str:
        if self.protocol == "PLAINTEXT":
            return ANONYMOUS
        if self.protocol == "SSL":
            return self._certificate_principal(context) or ANONYMOUS
        token = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
        if token is not None:
            if not isinstance(token, str) or not token.startswith("Bearer ") or self.signer is None:
                raise Refused(grpc.StatusCode.UNAUTHENTICATED, "SASL_AUTHENTICATION_FAILED", "malformed authorization")
            try:
                return self.signer.verify(token[len("Bearer "):], int(time.time() * 1000)).principal
            except TokenError as exc:
                raise Refused(grpc.StatusCode.UNAUTHENTICATED, exc.code, str(exc), reauthenticate=True) from None
        found = self._certificate_principal(context) if self.protocol == "SASL_SSL" else None
        if found is None:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "SASL_AUTHENTICATION_FAILED",
                          "this listener needs SASL: authenticate first (SaslHandshake, SaslAuthenticate)")  # fmt: skip
        return found

    def check(self, method: str, request: Any, context: Any) -> Check | None:
        """The caller's Check (None: no authorizer); Refused when it may not make this call."""
        principal = self.principal(context)
        if self.authorizer is None:
            return None
        check = Check(self.authorizer.current(), principal, peer_host(context.peer()))
        rule = self.rules.get(method)
        if rule is None:  # R1
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, "CLUSTER_AUTHORIZATION_FAILED", f"{method}: no rule")
        denial = rule(request, check)
        if denial is not None:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, denial.code, denial.message)
        return check


def _post(method: str, request: Any, response: Any, check: Check | None) -> Any:
    if check is not None:
        if method == "Metadata":
            filter_metadata(response, check, request.topics)
        elif method == "ListGroups":
            filter_groups(response, check)
        elif method == "ListTransactions":
            filter_transactions(response, check)
    return response


def _refusing(handler: Any, method: str) -> Any:
    """A handler of ``handler``'s kind that refuses every call (fail closed, R1)."""
    details = f"CLUSTER_AUTHORIZATION_FAILED: {method} is not served checked"

    async def refuse_unary(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, details)

    async def refuse_stream(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, details)
        yield  # an async generator, as a streaming handler must be

    kinds = {
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }
    for kind, make in kinds.items():
        if getattr(handler, kind) is not None:
            refuse = refuse_unary if kind == "stream_unary" else refuse_stream
            return make(refuse, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)  # fmt: skip
    return handler


def _abort_sync(context: Any, refused: Refused) -> None:
    if refused.reauthenticate:
        context.set_trailing_metadata(((REAUTHENTICATE, "1"),))
    context.abort(refused.status, f"{refused.code}: {refused}")


class SecurityInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every handler of the listener with :class:`CallSecurity` (module docstring): a unary call is
    checked once, each message of a request stream (ReplicaFetch, FetchStream, ProduceStream) as its own
    request; any other kind of handler is refused rather than served unchecked. A refused message ends the
    stream: nothing after it is read, every request before it is answered, then the stream fails with the
    refusal (so a client knows the refused request is its oldest unanswered one, ``common.streams``)."""

    def __init__(self, security: CallSecurity) -> None:
        self._security = security

    def _streaming(self, handler: Any, method: str) -> Any:
        security = self._security
        behavior = handler.stream_stream
        if behavior is None or not inspect.isasyncgenfunction(behavior):
            return _refusing(handler, method)  # no such RPC today: fail closed rather than serve it unchecked

        async def checked_stream(request_iterator: Any, context: Any) -> Any:
            refusal: list[Refused] = []

            async def checked_requests() -> Any:
                async for request in request_iterator:
                    try:
                        security.check(method, request, context)
                    except Refused as refused:
                        refusal.append(refused)
                        return  # read no further: the requests before it are answered first
                    yield request

            async for response in behavior(checked_requests(), context):
                yield response
            if refusal:  # the refused request's answer, after those of every request before it
                refused = refusal[0]
                if refused.reauthenticate:
                    context.set_trailing_metadata(((REAUTHENTICATE, "1"),))
                await context.abort(refused.status, f"{refused.code}: {refused}")

        return grpc.stream_stream_rpc_method_handler(
            checked_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )  # fmt: skip

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        full = handler_call_details.method
        if handler is None or full.startswith(OPEN_SERVICES):
            return handler
        method = full.rsplit("/", 1)[-1]
        if handler.unary_unary is None:
            return self._streaming(handler, method)
        behavior = handler.unary_unary
        security = self._security

        if inspect.iscoroutinefunction(behavior):

            async def checked_async(request: Any, context: Any) -> Any:
                try:
                    check = security.check(method, request, context)
                except Refused as refused:
                    if refused.reauthenticate:
                        context.set_trailing_metadata(((REAUTHENTICATE, "1"),))
                    await context.abort(refused.status, f"{refused.code}: {refused}")
                return _post(method, request, await behavior(request, context), check)

            wrapped: Any = checked_async
        else:

            def checked(request: Any, context: Any) -> Any:
                try:
                    check = security.check(method, request, context)
                except Refused as refused:
                    _abort_sync(context, refused)
                    raise
                return _post(method, request, behavior(request, context), check)

            wrapped = checked
        return grpc.unary_unary_rpc_method_handler(
            wrapped, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
