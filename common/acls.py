"""Kafka's ACL codes (``org.apache.kafka.common.acl`` and ``...resource``): the one definition the clients
(``odradek/security/acls.py``) and the cluster (``metadata/acl.py``) share, so that a binding means
the same on both sides of the wire and in an ACL record of ``__cluster_metadata``."""

from __future__ import annotations

import enum

CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one name of the CLUSTER resource


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3
