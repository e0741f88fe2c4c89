"""``odradek users`` and ``odradek acls`` against a real cluster (one controller, two brokers): changes go to
the controller through one broker, land in ``__cluster_metadata`` and are seen by every broker; bad input
gets a clear error and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.helpers import UpProcess, odradek

pytestmark = pytest.mark.slow


def run(env: dict[str, str], *args: str, servers: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    done = odradek([*args, "--bootstrap-servers", servers], env, input=stdin)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def ok(env: dict[str, str], *args: str, servers: str, stdin: bytes | None = None) -> str:
    code, out, err = run(env, *args, servers=servers, stdin=stdin)
    assert code == 0, f"odradek {' '.join(args)} failed: {err}"
    return out


def test_users_and_acls_through_the_cli(
    start_up: Callable[..., UpProcess], env: dict[str, str], tmp_path: Path
) -> None:
    doc = start_up(1, 2).wait_ready()
    b1, b2 = (b["listen"] for b in doc["brokers"])

    # --- users: set through broker 1, seen by broker 2 ---
    password_file = tmp_path / "alice.pw"
    password_file.write_text("s3cret\n")
    out = ok(env, "users", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", str(password_file),
             servers=b1)  # fmt: skip
    assert "SCRAM-SHA-512 credential of user alice" in out
    ok(env, "users", "add", "alice", "--iterations", "4096", servers=b1, stdin=b"other\n")  # SHA-256 from stdin
    for broker in (b1, b2):
        listing = ok(env, "users", "list", servers=broker)
        assert "alice" in listing
        assert "SCRAM-SHA-256 (iterations=4096)" in listing
        assert "SCRAM-SHA-512 (iterations=8192)" in listing

    code, _, err = run(env, "users", "remove", "bob", servers=b2)
    assert code != 0
    assert "RESOURCE_NOT_FOUND" in err
    code, _, err = run(env, "users", "add", "carol", "--iterations", "100", servers=b1, stdin=b"pw\n")
    assert code != 0
    assert "iterations" in err
    code, _, err = run(env, "users", "add", "carol", servers=b1, stdin=b"\n")
    assert code != 0
    assert "empty" in err
    assert "carol" not in ok(env, "users", "list", servers=b2)

    # --- ACLs ---
    out = ok(env, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
             "--topic", "orders", servers=b1)  # fmt: skip
    assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in out
    ok(env, "acls", "add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", "pay",
       "--resource-pattern-type", "prefixed", servers=b1)  # fmt: skip
    ok(env, "acls", "add", "--allow-principal", "User:*", "--consumer", "--topic", "logs", "--group", "g1", servers=b1)

    before = ok(env, "acls", "list", servers=b2)
    code, _, err = run(env, "acls", "add", "--allow-principal", "User:alice", "--operation", "ClusterAction",
                       "--group", "g1", servers=b1)  # fmt: skip
    assert code != 0
    assert "INVALID_REQUEST" in err
    assert "CLUSTER_ACTION is not valid on a GROUP" in err
    code, _, err = run(env, "acls", "add", "--allow-principal", "alice", "--topic", "t", servers=b1)
    assert code != 0
    assert "Type:name" in err
    assert ok(env, "acls", "list", servers=b2) == before

    for broker in (b1, b2):
        listing = ok(env, "acls", "list", servers=broker)
        assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listing
        assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listing
        assert "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)" in listing
        assert "name=pay, patternType=PREFIXED" in listing
        assert "(principal=User:*, host=*, operation=READ, permissionType=ALLOW)" in listing  # consumer role
        assert "resourceType=GROUP, name=g1" in listing

    matching = ok(env, "acls", "list", "--topic", "payments", "--resource-pattern-type", "match", servers=b2)
    assert "User:bob" in matching
    assert "User:alice" not in matching
    only_alice = ok(env, "acls", "list", "--principal", "User:alice", servers=b2)
    assert "User:bob" not in only_alice
    assert "User:alice" in only_alice

    code, _, err = run(env, "acls", "remove", "--topic", "orders", servers=b1)
    assert code != 0
    assert "--force" in err
    out = ok(env, "acls", "remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
             "--force", servers=b1)  # fmt: skip
    assert "operation=READ" in out
    after = ok(env, "acls", "list", "--topic", "orders", servers=b2)
    assert "operation=READ" not in after
    assert "operation=DESCRIBE" in after

    ok(env, "users", "remove", "alice", servers=b2)
    assert "alice" not in ok(env, "users", "list", servers=b1)
