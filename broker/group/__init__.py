"""The group coordinator: consumer groups (KIP-848) and committed offsets on ``__consumer_offsets``.

See ``README.md`` here for the modules and ``PROTOCOL.md`` for what clients must do.
"""
