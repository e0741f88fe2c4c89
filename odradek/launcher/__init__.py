"""``odradek up``: a local cluster as child processes (``plan``: layout and cluster.json; ``children``:
the processes; ``up``: the command)."""
