"""Errors raised by the odradek package.

Brokers and controllers answer with Kafka's error names (``NOT_LEADER_OR_FOLLOWER``,
``TOPIC_ALREADY_EXISTS``, ...) in ``odradek.common.Error.code``; :func:`error_from_code` turns a name into
the typed exception below. Each :class:`KafkaError` class carries its ``code``, whether it is
``retriable`` (the clients retry those, within their timeouts) and whether it means the client's
cluster metadata is stale (``invalid_metadata``: refresh before retrying), following Kafka's
``RetriableException`` and ``InvalidMetadataException`` hierarchies.

Errors of the client itself that Kafka reports as exceptions rather than codes: :class:`ConfigError`
(a bad configuration), :class:`KafkaTimeoutError` (a client-side deadline passed; the same class as
REQUEST_TIMED_OUT, as in Kafka), :class:`IllegalStateError` (e.g. sending after close),
:class:`NotSupportedYetError` (a feature that arrives with a later issue).
"""

from __future__ import annotations

from common.errors import CommandError


class OdradekError(Exception):
    """Base of every error the odradek package raises."""


class CliError(OdradekError, CommandError):
    """A user-facing command failure: the message is printed as is; the exit status is ``status``
    (``common.errors.CommandError``, which the servers' command lines raise)."""


class ConfigError(OdradekError, ValueError):
    """A client configuration is invalid: an unknown key, a bad value, or keys that contradict."""


ConfigException = ConfigError  # Kafka's name


class IllegalStateError(OdradekError, RuntimeError):
    """The call does not fit the object's state (e.g. ``send`` after ``close``)."""


class NotSupportedYetError(OdradekError, NotImplementedError):
    """A Kafka feature this build does not have yet (transactions, ...)."""


# ----------------------------------------------------------------------------------- Kafka errors


class KafkaError(OdradekError):
    """An error with Kafka's name. ``code`` is that name; ``retriable`` says whether trying again may succeed."""

    code = "UNKNOWN_SERVER_ERROR"
    description = "the server hit an unexpected error"
    retriable = False
    invalid_metadata = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description)

    @property
    def message(self) -> str:
        return str(self)


class UnknownKafkaError(KafkaError):
    """A code this client does not know (or UNKNOWN_SERVER_ERROR); ``code`` is the one received."""

    def __init__(self, message: str | None = None, code: str = "UNKNOWN_SERVER_ERROR") -> None:
        super().__init__(message or f"the server answered with error {code}")
        self.code = code


class RetriableError(KafkaError):
    """Base of the errors that may go away by themselves (Kafka's RetriableException)."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """Retriable, and the client's view of leaders is probably stale: refresh metadata first."""

    invalid_metadata = True


class NetworkError(InvalidMetadataError):
    code = "NETWORK_EXCEPTION"
    description = "the connection to a broker failed"


class KafkaTimeoutError(RetriableError, TimeoutError):
    """A deadline passed: the broker's REQUEST_TIMED_OUT, or a client-side wait (max.block.ms, delivery.timeout.ms)."""

    code = "REQUEST_TIMED_OUT"
    description = "the request timed out"


RequestTimedOutError = KafkaTimeoutError


class NotLeaderOrFollowerError(InvalidMetadataError):
    code = "NOT_LEADER_OR_FOLLOWER"
    description = "this broker is not the leader (or a follower) of the partition"


class UnknownTopicOrPartitionError(InvalidMetadataError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    description = "this server does not host the topic or partition"


class LeaderNotAvailableError(InvalidMetadataError):
    code = "LEADER_NOT_AVAILABLE"
    description = "the partition has no leader right now (an election is in progress)"


class ReplicaNotAvailableError(InvalidMetadataError):
    code = "REPLICA_NOT_AVAILABLE"
    description = "the replica is not available"


class FencedLeaderEpochError(InvalidMetadataError):
    code = "FENCED_LEADER_EPOCH"
    description = "the leader epoch in the request is older than the broker's"


class UnknownLeaderEpochError(RetriableError):
    code = "UNKNOWN_LEADER_EPOCH"
    description = "the leader epoch in the request is newer than the broker's"


class KafkaStorageError(InvalidMetadataError):
    code = "KAFKA_STORAGE_ERROR"
    description = "the broker's disk failed for this partition"


class UnknownTopicIdError(InvalidMetadataError):
    code = "UNKNOWN_TOPIC_ID"
    description = "this server does not know the topic id"


class NotEnoughReplicasError(RetriableError):
    code = "NOT_ENOUGH_REPLICAS"
    description = "fewer in-sync replicas than min.insync.replicas"


class NotEnoughReplicasAfterAppendError(RetriableError):
    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    description = "the records were written, but to fewer in-sync replicas than required"


class CorruptMessageError(RetriableError):
    code = "CORRUPT_MESSAGE"
    description = "a record batch failed its CRC or is malformed"


class NotControllerError(RetriableError):
    code = "NOT_CONTROLLER"
    description = "this node is not the active controller"


class OffsetNotAvailableError(RetriableError):
    code = "OFFSET_NOT_AVAILABLE"
    description = "the leader's high watermark has not caught up yet"


class PreferredLeaderNotAvailableError(RetriableError):
    code = "PREFERRED_LEADER_NOT_AVAILABLE"
    description = "the preferred leader is not available"


class ThrottlingQuotaExceededError(RetriableError):
    code = "THROTTLING_QUOTA_EXCEEDED"
    description = "a quota was exceeded"


class CoordinatorNotAvailableError(RetriableError):
    code = "COORDINATOR_NOT_AVAILABLE"
    description = "the group coordinator is not available"


class NotCoordinatorError(RetriableError):
    code = "NOT_COORDINATOR"
    description = "this broker is not the group's coordinator"


class CoordinatorLoadInProgressError(RetriableError):
    code = "COORDINATOR_LOAD_IN_PROGRESS"
    description = "the group coordinator is loading its state"


class RebalanceInProgressError(KafkaError):
    code = "REBALANCE_IN_PROGRESS"
    description = "the group is rebalancing"


class OffsetOutOfRangeError(KafkaError):
    code = "OFFSET_OUT_OF_RANGE"
    description = "the offset is outside the partition's log"


class NoOffsetForPartitionError(KafkaError):
    """No position and ``auto.offset.reset=none`` (Kafka's NoOffsetForPartitionException)."""

    code = "OFFSET_OUT_OF_RANGE"
    description = "the partition has no position and auto.offset.reset is none"


class LogTruncationError(OffsetOutOfRangeError):
    """The leader's log diverged below the consumer's position (records it returned are gone: an unclean
    election) and ``auto.offset.reset`` is none (Kafka's LogTruncationException, KIP-320). ``divergent_offset``
    is the first offset known to differ; seek there (or elsewhere) to go on."""

    description = "the log was truncated below the consumer's position"

    def __init__(self, message: str | None = None, divergent_offset: int = -1) -> None:
        super().__init__(message)
        self.divergent_offset = divergent_offset


class MessageTooLargeError(KafkaError):
    code = "MESSAGE_TOO_LARGE"
    description = "the record or batch is larger than the maximum allowed"


RecordTooLargeError = MessageTooLargeError  # Kafka's class name


class RecordListTooLargeError(KafkaError):
    code = "RECORD_LIST_TOO_LARGE"
    description = "the request's records are larger than the maximum allowed"


class InvalidRecordError(KafkaError):
    code = "INVALID_RECORD"
    description = "the broker rejected a record"


class InvalidTimestampError(KafkaError):
    code = "INVALID_TIMESTAMP"
    description = "a record timestamp is out of the accepted range"


class InvalidRequiredAcksError(KafkaError):
    code = "INVALID_REQUIRED_ACKS"
    description = "acks must be 0, 1 or -1 (all)"


class InvalidFetchSizeError(KafkaError):
    code = "INVALID_FETCH_SIZE"
    description = "the fetch size is invalid"


class UnsupportedCompressionTypeError(KafkaError):
    code = "UNSUPPORTED_COMPRESSION_TYPE"
    description = "the compression codec is not supported"


class UnsupportedVersionError(KafkaError):
    code = "UNSUPPORTED_VERSION"
    description = "the server does not support this request"


class InvalidRequestError(KafkaError):
    code = "INVALID_REQUEST"
    description = "the request is malformed"


class InvalidTopicError(KafkaError):
    code = "INVALID_TOPIC_EXCEPTION"
    description = "the topic name is invalid, or the topic may not be written to"


class TopicAlreadyExistsError(KafkaError):
    code = "TOPIC_ALREADY_EXISTS"
    description = "the topic already exists"


class InvalidPartitionsError(KafkaError):
    code = "INVALID_PARTITIONS"
    description = "the number of partitions is invalid"


class InvalidReplicationFactorError(KafkaError):
    code = "INVALID_REPLICATION_FACTOR"
    description = "the replication factor is invalid (more than the live brokers?)"


class InvalidReplicaAssignmentError(KafkaError):
    code = "INVALID_REPLICA_ASSIGNMENT"
    description = "the replica assignment is invalid"


class InvalidConfigError(KafkaError):
    code = "INVALID_CONFIG"
    description = "a configuration key or value is invalid"


class PolicyViolationError(KafkaError):
    code = "POLICY_VIOLATION"
    description = "the request violates a configured policy"


class TopicDeletionDisabledError(KafkaError):
    code = "TOPIC_DELETION_DISABLED"
    description = "topic deletion is disabled on the cluster"


class ElectionNotNeededError(KafkaError):
    code = "ELECTION_NOT_NEEDED"
    description = "the preferred leader is already the leader"


class EligibleLeadersNotAvailableError(KafkaError):
    code = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    description = "no eligible replica can become the leader"


class BrokerNotAvailableError(KafkaError):
    code = "BROKER_NOT_AVAILABLE"
    description = "the broker is not available"


class DuplicateBrokerRegistrationError(KafkaError):
    code = "DUPLICATE_BROKER_REGISTRATION"
    description = "another live broker is registered with this broker id"


class InvalidRegularExpressionError(KafkaError):
    code = "INVALID_REGULAR_EXPRESSION"
    description = "the subscription regex is not valid RE2"


class StaleBrokerEpochError(KafkaError):
    code = "STALE_BROKER_EPOCH"
    description = "the broker epoch is stale"


class InconsistentClusterIdError(KafkaError):
    code = "INCONSISTENT_CLUSTER_ID"
    description = "the cluster id does not match"


class OutOfOrderSequenceNumberError(KafkaError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    description = "the broker received an out of order sequence number"


class DuplicateSequenceNumberError(KafkaError):
    code = "DUPLICATE_SEQUENCE_NUMBER"
    description = "the broker already has a batch with this sequence number"


class InvalidProducerEpochError(KafkaError):
    code = "INVALID_PRODUCER_EPOCH"
    description = "the producer epoch is fenced by a newer one"


class UnknownProducerIdError(KafkaError):
    code = "UNKNOWN_PRODUCER_ID"
    description = "the broker has no state for this producer id"


class GroupIdNotFoundError(KafkaError):
    code = "GROUP_ID_NOT_FOUND"
    description = "the group does not exist"


class InvalidGroupIdError(KafkaError):
    code = "INVALID_GROUP_ID"
    description = "the group id is invalid"


class UnknownMemberIdError(KafkaError):
    code = "UNKNOWN_MEMBER_ID"
    description = "the group coordinator does not know this member"


class IllegalGenerationError(KafkaError):
    code = "ILLEGAL_GENERATION"
    description = "the group generation is not current"


class FencedInstanceIdError(KafkaError):
    code = "FENCED_INSTANCE_ID"
    description = "another consumer with the same group.instance.id has joined"


class FencedMemberEpochError(KafkaError):
    code = "FENCED_MEMBER_EPOCH"
    description = "the group coordinator fenced this member (its epoch is not current): it rejoins"


class StaleMemberEpochError(KafkaError):
    code = "STALE_MEMBER_EPOCH"
    description = "the member epoch of the request is not the member's current epoch"


class UnreleasedInstanceIdError(KafkaError):
    code = "UNRELEASED_INSTANCE_ID"
    description = "the group.instance.id is still held by a member that has not left the group"


class GroupMaxSizeReachedError(KafkaError):
    code = "GROUP_MAX_SIZE_REACHED"
    description = "the group has reached its maximum number of members"


class NonEmptyGroupError(KafkaError):
    code = "NON_EMPTY_GROUP"
    description = "the group still has active members"


class UnsupportedAssignorError(KafkaError):
    code = "UNSUPPORTED_ASSIGNOR"
    description = "the group coordinator does not know the requested assignor"


class OffsetMetadataTooLargeError(KafkaError):
    code = "OFFSET_METADATA_TOO_LARGE"
    description = "the metadata string of an offset commit is too large"


class TopicAuthorizationFailedError(KafkaError):
    code = "TOPIC_AUTHORIZATION_FAILED"
    description = "the principal is not authorized to access the topic"


class GroupAuthorizationFailedError(KafkaError):
    code = "GROUP_AUTHORIZATION_FAILED"
    description = "the principal is not authorized to access the group"


class ClusterAuthorizationFailedError(KafkaError):
    code = "CLUSTER_AUTHORIZATION_FAILED"
    description = "the principal is not authorized to perform this cluster operation"


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    description = "the principal is not authorized to use the transactional id"


class SaslAuthenticationFailedError(KafkaError):
    code = "SASL_AUTHENTICATION_FAILED"
    description = "SASL authentication failed"


class IllegalSaslStateError(KafkaError):
    code = "ILLEGAL_SASL_STATE"
    description = "the SASL request does not fit the authentication exchange's state"


class UnsupportedSaslMechanismError(KafkaError):
    code = "UNSUPPORTED_SASL_MECHANISM"
    description = "the server does not enable the requested SASL mechanism"


class SecurityDisabledError(KafkaError):
    code = "SECURITY_DISABLED"
    description = "no authorizer is configured on the cluster"


class ResourceNotFoundError(KafkaError):
    code = "RESOURCE_NOT_FOUND"
    description = "the resource (for example a user's SCRAM credential) does not exist"


class UnsupportedByAuthenticationError(KafkaError):
    code = "UNSUPPORTED_BY_AUTHENTICATION"
    description = "the operation is not supported with the caller's kind of authentication"


class UnacceptableCredentialError(KafkaError):
    code = "UNACCEPTABLE_CREDENTIAL"
    description = "the SCRAM credential is not acceptable (user name, iterations, salt or salted password)"


class DuplicateResourceError(KafkaError):
    code = "DUPLICATE_RESOURCE"
    description = "the request names one resource twice"


class ProducerFencedError(KafkaError):
    code = "PRODUCER_FENCED"
    description = "another producer with the same transactional.id took over: this one is fenced (close it)"


class InvalidTxnStateError(KafkaError):
    code = "INVALID_TXN_STATE"
    description = "the request does not fit the transaction's state"


class ConcurrentTransactionsError(RetriableError):
    code = "CONCURRENT_TRANSACTIONS"
    description = "the transaction coordinator is still completing a previous change of this transactional id"


class InvalidProducerIdMappingError(KafkaError):
    code = "INVALID_PRODUCER_ID_MAPPING"
    description = "the producer id is not the one of this transactional id"


class InvalidTransactionTimeoutError(KafkaError):
    code = "INVALID_TRANSACTION_TIMEOUT"
    description = "transaction.timeout.ms is larger than the broker's transaction.max.timeout.ms"


class TransactionalIdNotFoundError(KafkaError):
    code = "TRANSACTIONAL_ID_NOT_FOUND"
    description = "the transactional id is not known to its coordinator"


class TransactionCoordinatorFencedError(KafkaError):
    code = "TRANSACTION_COORDINATOR_FENCED"
    description = "a newer transaction coordinator took over"


class TransactionAbortedError(OdradekError):
    """A record of a transaction that was aborted (``abort_transaction`` before it was sent): it is not
    written (Kafka's TransactionAbortedException)."""


class CommitFailedError(OdradekError):
    """A commit the coordinator refused because this consumer is no longer a current member of the group (or
    its partitions moved): Kafka's CommitFailedException. Not retriable: the records may be delivered again."""


def _subclasses(cls: type[KafkaError]) -> list[type[KafkaError]]:
    out: list[type[KafkaError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


ERRORS_BY_CODE: dict[str, type[KafkaError]] = {
    cls.code: cls
    for cls in _subclasses(KafkaError)
    if cls not in (UnknownKafkaError, RetriableError, InvalidMetadataError, NoOffsetForPartitionError,
                   LogTruncationError)  # fmt: skip
}
ERRORS_BY_CODE["INVALID_TOPIC"] = InvalidTopicError  # a shorter spelling a server may use
ERRORS_BY_CODE["RECORD_TOO_LARGE"] = MessageTooLargeError


def error_from_code(code: str, message: str = "") -> KafkaError:
    """The typed exception for Kafka error name ``code`` (an unknown name gives :class:`UnknownKafkaError`)."""
    if not code:
        raise ValueError("an empty error code means success, not an error")
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        return UnknownKafkaError(message or None, code=code)
    return cls(message or None)


def is_retriable(code: str) -> bool:
    cls = ERRORS_BY_CODE.get(code)
    return cls is not None and cls.retriable
