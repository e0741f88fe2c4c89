"""Consumer groups on the client side (KIP-848): membership, heartbeats, rebalance listener, offsets.

``membership`` is the pure state machine; ``manager`` drives it with the heartbeat thread and makes the
offset calls; ``coordinator`` finds and calls the group's coordinator; ``offsets`` builds and reads
OffsetCommit/OffsetFetch; ``listener`` is the application's rebalance listener.
"""

from odradek.group.listener import ConsumerRebalanceListener, RebalanceListener

__all__ = ["ConsumerRebalanceListener", "RebalanceListener"]
