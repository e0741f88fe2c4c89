from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SaslHandshakeRequest(_message.Message):
    __slots__ = ("mechanism",)
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    def __init__(self, mechanism: _Optional[str] = ...) -> None: ...

class SaslHandshakeResponse(_message.Message):
    __slots__ = ("error", "mechanisms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MECHANISMS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    mechanisms: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., mechanisms: _Optional[_Iterable[str]] = ...) -> None: ...

class SaslAuthenticateRequest(_message.Message):
    __slots__ = ("mechanism", "auth_bytes", "exchange_id")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    auth_bytes: bytes
    exchange_id: str
    def __init__(self, mechanism: _Optional[str] = ..., auth_bytes: _Optional[bytes] = ..., exchange_id: _Optional[str] = ...) -> None: ...

class SaslAuthenticateResponse(_message.Message):
    __slots__ = ("error", "auth_bytes", "exchange_id", "session_token", "session_lifetime_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_LIFETIME_MS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    auth_bytes: bytes
    exchange_id: str
    session_token: str
    session_lifetime_ms: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., auth_bytes: _Optional[bytes] = ..., exchange_id: _Optional[str] = ..., session_token: _Optional[str] = ..., session_lifetime_ms: _Optional[int] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[int] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[int] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("error", "controller", "results")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.Error]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., results: _Optional[_Iterable[_Union[_common_pb2.Error, _Mapping]]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("error", "controller", "results")
    class FilterResult(_message.Message):
        __slots__ = ("error", "deleted")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        DELETED_FIELD_NUMBER: _ClassVar[int]
        error: _common_pb2.Error
        deleted: _containers.RepeatedCompositeFieldContainer[AclBinding]
        def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., deleted: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    results: _containers.RepeatedCompositeFieldContainer[DeleteAclsResponse.FilterResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., results: _Optional[_Iterable[_Union[DeleteAclsResponse.FilterResult, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error", "acls")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions")
    class Deletion(_message.Message):
        __slots__ = ("name", "mechanism")
        NAME_FIELD_NUMBER: _ClassVar[int]
        MECHANISM_FIELD_NUMBER: _ClassVar[int]
        name: str
        mechanism: int
        def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[int] = ...) -> None: ...
    class Upsertion(_message.Message):
        __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
        NAME_FIELD_NUMBER: _ClassVar[int]
        MECHANISM_FIELD_NUMBER: _ClassVar[int]
        ITERATIONS_FIELD_NUMBER: _ClassVar[int]
        SALT_FIELD_NUMBER: _ClassVar[int]
        SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
        name: str
        mechanism: int
        iterations: int
        salt: bytes
        salted_password: bytes
        def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[int] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[AlterUserScramCredentialsRequest.Deletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[AlterUserScramCredentialsRequest.Upsertion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[AlterUserScramCredentialsRequest.Deletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[AlterUserScramCredentialsRequest.Upsertion, _Mapping]]] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error", "controller", "results")
    class Result(_message.Message):
        __slots__ = ("user", "error")
        USER_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        user: str
        error: _common_pb2.Error
        def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    results: _containers.RepeatedCompositeFieldContainer[AlterUserScramCredentialsResponse.Result]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., results: _Optional[_Iterable[_Union[AlterUserScramCredentialsResponse.Result, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error", "results")
    class CredentialInfo(_message.Message):
        __slots__ = ("mechanism", "iterations")
        MECHANISM_FIELD_NUMBER: _ClassVar[int]
        ITERATIONS_FIELD_NUMBER: _ClassVar[int]
        mechanism: int
        iterations: int
        def __init__(self, mechanism: _Optional[int] = ..., iterations: _Optional[int] = ...) -> None: ...
    class Result(_message.Message):
        __slots__ = ("user", "error", "credentials")
        USER_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
        user: str
        error: _common_pb2.Error
        credentials: _containers.RepeatedCompositeFieldContainer[DescribeUserScramCredentialsResponse.CredentialInfo]
        def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., credentials: _Optional[_Iterable[_Union[DescribeUserScramCredentialsResponse.CredentialInfo, _Mapping]]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    results: _containers.RepeatedCompositeFieldContainer[DescribeUserScramCredentialsResponse.Result]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., results: _Optional[_Iterable[_Union[DescribeUserScramCredentialsResponse.Result, _Mapping]]] = ...) -> None: ...
