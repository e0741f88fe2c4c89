"""The controller quorum: the Raft-replicated ``__cluster_metadata`` log and the active controller's decisions.

- ``controller.core``: ``ControllerCore``, every decision as a pure function of the image, returning records.
- ``controller.raft``: the replicated log as a pure state machine and its driver around pysyncobj.
- ``controller.server`` and ``controller.service``: the controller thread and the gRPC servicer.
- ``controller.security``: the authorizer, principal mapping, SASL and session tokens of every node.

The records, the image and delta, snapshots and config schemas it decides on are the ``metadata`` package,
which brokers share. ``controller`` imports ``metadata`` and ``proto`` (and its command line the client's
``odradek.errors``).
"""
