"""The Raft-replicated ``__cluster_metadata`` log: a pure state machine and its pysyncobj driver.

- :mod:`controller.raft.state`: :class:`MetadataLogState`, the rules (offsets, de-duplication, fencing,
  trimming), testable without Raft.
- :mod:`controller.raft.quorum`: :class:`MetadataQuorum`, the thin driver around pysyncobj.
- :mod:`controller.raft.journal` / :mod:`controller.raft.dump`: crash-safe files for pysyncobj.
- :mod:`controller.raft.tuning`: knobs, pysyncobj settings and the cluster secret.
"""
