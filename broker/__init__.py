"""The broker process: the Broker gRPC service, request handlers, purgatory, metadata, storage upkeep.

- ``broker.server``: :class:`BrokerServer`, the process (threads, start and stop order).
- ``broker.service`` and ``broker.handlers``: the Broker gRPC service, one handler module per RPC.
- ``broker.replica_manager``: the partitions on this broker and the metadata changes they follow.
- ``broker.purgatory``, ``broker.delayed_fetch``, ``broker.delayed_produce``: requests that wait.
- ``broker.metadata_loader``, ``broker.metadata_cache``, ``broker.lifecycle``, ``broker.controller_channel``:
  the broker's side of the control plane.
- ``broker.config``, ``broker.log_manager``, ``broker.maintenance``: configuration and the data directory.
- ``broker.cli``: ``odradek broker``.
"""
