"""The controller quorum: metadata records, the MetadataImage and MetadataDelta, the Raft state machine.

- ``controller.records``: the typed ``__cluster_metadata`` records, ``encode_record`` / ``decode_record``.
- ``controller.image``: ``MetadataImage`` (immutable, shared by readers) and ``MetadataDelta``.
- ``controller.snapshot``: ``encode_snapshot`` / ``decode_snapshot`` of an image.
- ``controller.errors``: ``MetadataError`` and its kinds.

``controller`` imports nothing of the project but ``proto`` and ``log.record``.
"""
