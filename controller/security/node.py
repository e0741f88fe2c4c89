"""What a node's gRPC servers need for security, from its settings and its metadata image: the SASL authority,
the authorizer cache, and per listener the TLS credentials, the interceptor and the Sasl service."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.security.authorizer import Authorizer
from controller.security.interceptor import AuthorizerCache, CallSecurity, SecurityInterceptor
from controller.security.rules import Rule
from controller.security.sasl_service import SaslAuthority, SaslService
from controller.security.settings import NodeSecurity
from metadata.image import MetadataImage


@dataclass
class NodeGuard:
    """One node's security at run time (immutable after construction; its parts are thread-safe)."""

    settings: NodeSecurity
    authority: SaslAuthority
    authorizer: AuthorizerCache | None
    rules: Mapping[str, Rule]

    @classmethod
    def build(cls, settings: NodeSecurity, image: Callable[[], MetadataImage], rules: Mapping[str, Rule]) -> NodeGuard:
        def credentials(user: str) -> Any:
            return image().scram_credentials.get(user, {}).values()

        authority = SaslAuthority(credentials, settings.sasl_mechanisms, settings.reauth_ms)
        template = Authorizer(frozenset(), settings.super_users, settings.allow_everyone_if_no_acl_found)
        authorizer = AuthorizerCache(image, template) if settings.authorizer_enabled else None
        return cls(settings, authority, authorizer, rules)

    def interceptors(self, listener: str) -> list[Any]:
        protocol = self.settings.protocol(listener)
        mapper, signer = self.settings.principal_mapper, self.authority.signer
        call = CallSecurity(protocol, mapper, signer, self.authorizer, self.rules)
        return [SecurityInterceptor(call)]

    def add_sasl(self, server: Any, listener: str) -> None:
        from proto import security_pb2_grpc

        add: Any = security_pb2_grpc.add_SaslServicer_to_server  # generated code is untyped
        add(SaslService(self.authority, self.settings.protocol(listener)), server)
