"""What ``.gitignore`` names: build and run products inside the tree (``deploy/build/context/``, a copy of the
sources the image build makes), which the repository's own checks (``tests/test_docs.py``,
``tests/test_imports.py``) must not read as the repository's files."""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


@functools.cache
def ignore_patterns() -> tuple[str, ...]:
    lines = (ROOT / ".gitignore").read_text().splitlines() if (ROOT / ".gitignore").is_file() else []
    return tuple(line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#"))


def ignored(path: str) -> bool:
    """A build or run product (``deploy/build/context/``): a part of its path matches ``.gitignore``."""
    parts = path.strip("/").split("/")
    return any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in ignore_patterns())
