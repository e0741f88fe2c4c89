"""The cluster metadata model that brokers and controllers share: what ``__cluster_metadata`` holds and what
replaying it yields.

- ``metadata.records``: the typed records (one frozen dataclass per type, with Kafka's type ids);
  ``metadata.record_codec``: their strict binary codec, ``encode_record`` / ``decode_record``.
- ``metadata.image``: ``MetadataImage`` (immutable, shared by readers) and ``MetadataDelta``.
- ``metadata.snapshot``: ``encode_snapshot`` / ``decode_snapshot`` of an image.
- ``metadata.configs``: the config schemas (topic, broker, cluster, the controller's own).
- ``metadata.acl`` and ``metadata.scram``: ACL bindings and SCRAM credentials as the records carry them.
- ``metadata.errors``: ``MetadataError`` and its kinds.

``metadata`` imports nothing of the project but ``proto``; ``controller`` and ``broker`` both import it.
"""
