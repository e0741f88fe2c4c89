"""Replica placement for new partitions: Kafka's rack-unaware round robin (``AdminUtils``).

For brokers ``b[0..n-1]`` (ascending ids), a random start index ``s`` and a random replica shift ``h``:

- P1. Partition ``p``'s first replica (its preferred leader) is ``b[(p + s) % n]``: leaders go round the
  brokers, so ``N`` partitions give every broker ``N // n`` or ``N // n + 1`` leaderships.
- P2. Its ``j``-th follower is ``b[(first + 1 + (h + j) % (n - 1)) % n]``; the shift grows by one every
  ``n`` partitions so that followers are spread too. No broker appears twice in one partition.
- P3. Randomness comes only from the injected ``random.Random`` (docs/CONVENTIONS.md §2): a seed replays a placement.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def assign_replicas(
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    *,
    start_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition ..`` (rules P1-P3), in partition order."""
    ids = sorted(brokers)
    n = len(ids)
    if not 1 <= replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} needs 1..{n} brokers")
    start_index = rng.randrange(n)
    shift = rng.randrange(n)
    assignment = []
    for partition in range(start_partition, start_partition + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return assignment
