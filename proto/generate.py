"""Regenerate the Python modules of every ``proto/*.proto`` file: ``python -m proto.generate``.

Runs grpcio-tools' bundled protoc with the repository root as the include path, so generated modules
import each other as ``from proto import x_pb2``. ``--check`` regenerates into a temporary directory
and exits 1 naming every stale or missing module, changing nothing.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate_into(out_root: Path) -> list[Path]:
    """Run protoc over every .proto file, writing ``out_root/proto/*``; return the files written."""
    from grpc_tools import protoc  # a dev dependency: imported only when generating

    files = [str(p.relative_to(ROOT)) for p in proto_files()]
    if not files:
        return []
    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(files)}")
    return sorted(p for p in (out_root / "proto").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def stale_modules() -> list[str]:
    """Names of generated modules that differ from what protoc makes now (or are missing / orphaned)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate_into(Path(tmp))}
        committed = {p.name for p in PROTO_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}
        stale = [n for n, p in fresh.items() if not (PROTO_DIR / n).exists()
                 or not filecmp.cmp(p, PROTO_DIR / n, shallow=False)]
        stale += [f"{n} (no .proto makes it)" for n in committed - fresh.keys()]
        return sorted(stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proto.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale modules; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_modules()
        for name in stale:
            print(f"stale: proto/{name}", file=sys.stderr)
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        written = generate_into(Path(tmp))
        for old in PROTO_DIR.iterdir():
            if old.name.endswith(GENERATED_SUFFIXES):
                old.unlink()
        for path in written:
            shutil.copyfile(path, PROTO_DIR / path.name)
            print(f"wrote proto/{path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
