"""Chaos: fault injection against a live Odradek cluster, a recorded workload, and checkers of its history.

    python -m chaos run --duration 60 --seed 7 --faults kill-leader,kill-controller,pause

Modules: ``backends`` (how a cluster is started and hurt), ``history`` (the recorded operations),
``workload`` (producers, transactional producers, readers, group consumers), ``faults`` (the seeded schedule
and the nemesis that carries it out), ``checker``, ``checker_group`` and ``checker_txn`` (pure functions from
a history to anomalies, over the ``history_index`` they share),
``report`` (figures and text), ``runner`` (one run end to end), ``cli``. See ``chaos/README.md``.
Nothing in the project imports this package.
"""
