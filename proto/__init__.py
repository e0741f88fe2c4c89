"""Protocol buffer definitions (``*.proto``) and their generated Python modules.

Regenerate the modules after editing a ``.proto`` file with::

    .venv/bin/python -m proto.generate

The generated ``*_pb2.py`` / ``*_pb2_grpc.py`` / ``*_pb2.pyi`` files are committed; a test fails when they are
stale (``tests/test_proto_generated.py``).
"""
