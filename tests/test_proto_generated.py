"""The committed ``proto/*_pb2*.py`` modules match their ``.proto`` sources."""

from proto.generate import proto_files, stale_modules


def test_generated_modules_are_fresh() -> None:
    assert stale_modules() == [], "run: .venv/bin/python -m proto.generate"


def test_there_are_proto_files() -> None:
    assert proto_files(), "proto/ holds no .proto file"
