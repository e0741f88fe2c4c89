"""``odradek console``: a web console for any Odradek cluster, given its bootstrap servers.

It talks to the cluster through the client library only (``odradek.Admin``, ``odradek.Consumer``), like any
other client, so it works against any cluster it can reach and sees what its client configuration allows.
``README.md`` here describes the pages and the choices behind them.
"""
