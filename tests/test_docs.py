"""The documentation points at things that exist, and nothing points outside the repository.

Every name that ``docs/*.md`` and the folder READMEs quote in backticks and that looks like a reference into
the code is resolved: a path (``broker/server.py``, ``log/record/``) must exist, relative to the repository
or to the document's folder; a dotted name whose first part is one of the project's packages
(``replication.high_watermark.HighWatermark.maybe_advance``) or one of its classes
(``Purgatory.check_and_complete``) must name a module, and then a class, function, constant or method defined
in it. The look-up reads the source (``ast``): nothing is imported. A dotted string that does not resolve
but is a string literal of the code (a config key such as ``log.retention.ms``) is not a reference.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ignored import ignored

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "common", "odradek", "log", "metadata", "broker", "controller", "replication", "chaos", "spark", "proto", "tests",
    "deploy", "bench",
)  # fmt: skip
PATH_SUFFIXES = (".py", ".md", ".json", ".yml", ".yaml", ".proto", ".sh", ".toml", ".html", ".css", ".txt", ".cfg")

# Other projects' names that look like references into this one: Kafka configs Odradek does not have, and
# PySpark's ``spark.dataSource.register`` (``spark`` there is a SparkSession)
FOREIGN_NAMES = frozenset(
    {"controller.quorum.voters", "log.cleaner.io.max.bytes.per.second", "spark.dataSource.register"}
)

_BACKTICKED = re.compile(r"``?([^`\n]+?)``?")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PLACEHOLDER = re.compile(r"[<>{}*\s$|\[\]=,]|\.\.\.")


@functools.cache
def _tracked_files() -> tuple[str, ...]:
    """The repository's files: ``git ls-files`` in a clone, else the tree without what ``.gitignore`` names."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = out.splitlines()
    except (OSError, subprocess.CalledProcessError):  # an export without .git
        names = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d != ".git" and not ignored(d)]
            rel = Path(top).relative_to(ROOT)
            names += [str(rel / f) for f in files if not ignored(f)]
    return tuple(name for name in names if (ROOT / name).is_file())


@functools.cache
def _tracked_top_dirs() -> frozenset[str]:
    return frozenset(name.split("/")[0] for name in _tracked_files() if "/" in name) | {*PACKAGES, "docs"}


@functools.cache
def _basenames() -> frozenset[str]:
    return frozenset(name.rsplit("/", 1)[-1] for name in _tracked_files())


def _documents() -> list[Path]:
    """``docs/*.md``, the root README and every folder's README (tracked, and new ones under ``docs/``)."""
    tracked = {ROOT / f for f in _tracked_files() if f.startswith("docs/") or f.endswith("README.md")}
    return sorted(tracked | set((ROOT / "docs").glob("*.md")))


def _tokens(doc: Path) -> Iterator[tuple[int, str]]:
    fenced = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in _BACKTICKED.finditer(line):
            yield number, match.group(1).strip()


# --- the code's names, read from its source --------------------------------------------------------------


@functools.cache
def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _assigned_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _assigned_names(element)


def _names_of_body(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines (defs, classes, assignments, imports, ``__all__``)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in _assigned_names(target):
                    names[name] = node
                    if name == "__all__" and isinstance(node.value, ast.List | ast.Tuple):
                        for element in node.value.elts:
                            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                                names[element.value] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try):  # ``if TYPE_CHECKING:`` blocks and guarded imports
            names.update(_names_of_body(node.body))
    return names


def _class_members(cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> set[str]:
    """A class's attributes: its body's names, every ``self.x = ...`` in its methods, and what it inherits from
    the project's classes it names as bases (``Partition.read``, defined in its base ``PartitionReads``)."""
    members = set(_names_of_body(cls.body))
    for node in ast.walk(cls):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Store):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            members.add(node.attr)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in seen:
            for parent in _project_classes().get(base.id, ()):
                members |= _class_members(parent, seen | {cls.name, base.id})
    return members


@functools.cache
def _project_classes() -> dict[str, list[ast.ClassDef]]:
    classes: dict[str, list[ast.ClassDef]] = {}
    for name in _tracked_files():
        if name.endswith(".py") and name.split("/")[0] in PACKAGES and "_pb2" not in name:
            for node in ast.walk(_module_tree(ROOT / name)):
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(node)
    return classes


@functools.cache
def _string_literals() -> frozenset[str]:
    literals: set[str] = set()
    for name in _tracked_files():
        if name.endswith(".py") and "_pb2" not in name and ROOT / name != Path(__file__).resolve():
            for node in ast.walk(_module_tree(ROOT / name)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    literals.add(node.value)
    return frozenset(literals)


def _resolve_in_module(module: str, rest: list[str]) -> bool:
    path = _module_file(module)
    if path is None:
        return False
    if not rest:
        return True
    names = _names_of_body(_module_tree(path).body)
    node = names.get(rest[0])
    if node is None:
        return False
    if len(rest) == 1:
        return True
    return isinstance(node, ast.ClassDef) and len(rest) == 2 and rest[1] in _class_members(node)


def _resolve_dotted(name: str) -> bool | None:
    """True/False for a reference into the code; None for a dotted word that is not one (``linger.ms``)."""
    parts = name.split(".")
    if parts[0] in PACKAGES:
        for cut in range(len(parts), 0, -1):
            if _module_file(".".join(parts[:cut])) is not None:
                return _resolve_in_module(".".join(parts[:cut]), parts[cut:])
        return False
    classes = _project_classes().get(parts[0])
    if classes is None:
        return None
    return len(parts) == 2 and any(parts[1] in _class_members(cls) for cls in classes)


def _problem(doc: Path, token: str) -> str | None:
    """Why ``token`` (quoted in ``doc``) does not resolve, or None when it does or is no reference."""
    text = token.strip()
    if text.startswith(("python -m ", ".venv/bin/python -m ")):
        text = text.split(" -m ", 1)[1].split()[0]
    if ":" in text and _DOTTED.fullmatch(text.replace(":", ".")) and "." in text.split(":")[0]:
        text = text.replace(":", ".")  # ``odradek.cli:main``
    call = re.fullmatch(r"([\w.]+)\(.*\)", text)
    if call:
        text = call.group(1)
    if "/" in text and not text.startswith(("http:", "https:")):
        if _PLACEHOLDER.search(text) or not (text.endswith("/") or text.endswith(PATH_SUFFIXES)):
            return None
        if text.split("/")[0] not in _tracked_top_dirs() and not (doc.parent / text.split("/")[0]).exists():
            return None  # made at run time (``odradek-data/cluster.json``), not a file of the repository
        path = text.split("#")[0]
        if (ROOT / path).exists() or (doc.parent / path).exists() or ignored(path):
            return None
        return f"path {text!r} does not exist"
    if _PLACEHOLDER.search(text) or not _DOTTED.fullmatch(text):
        return None
    if text.endswith((".py", ".md")) and text.count(".") == 1:  # a file named alone (a table of tests)
        return None if text in _basenames() or (doc.parent / text).exists() else f"no file is named {text!r}"
    resolved = _resolve_dotted(text)
    if resolved is None or resolved or text in FOREIGN_NAMES:
        return None
    if text in _string_literals():  # a config key or another dotted string the code uses
        return None
    return f"name {text!r} is not defined in the code"


def _problems(doc: Path) -> list[str]:
    rel = doc.relative_to(ROOT)
    return [f"{rel}:{number}: {why}" for number, token in _tokens(doc) if (why := _problem(doc, token))]


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: str(d.relative_to(ROOT)))
def test_every_reference_in_the_docs_resolves(doc: Path) -> None:
    problems = _problems(doc)
    assert not problems, "\n".join(problems)


def test_the_docs_exist_and_are_checked() -> None:
    names = {str(d.relative_to(ROOT)) for d in _documents()}
    for required in ("broker/README.md", "controller/README.md", "replication/README.md"):
        assert required in names
    for required in ("docs/ARCHITECTURE.md", "docs/OPERATIONS.md", "docs/CONVENTIONS.md", "docs/INTERFACE.md"):
        assert required in names


def test_the_resolver_tells_references_from_other_words(tmp_path: Path) -> None:
    """The checker itself: it finds what exists, and names what does not."""
    doc = ROOT / "docs" / "ARCHITECTURE.md"
    good = ["broker/purgatory.py", "log/record/", "broker.purgatory.Purgatory.check_and_complete",
            "Purgatory.try_complete_else_watch", "odradek.cli:main", "MetadataDelta.replay(record)",
            "python -m bench.storage", "linger.ms", "log.retention.ms", "odradek.Producer",
            "odradek-data/cluster.json", "cluster.json", "odradek:latest", "test_log.py",
            "deploy/build/context/", "Partition.read", "replication.partition.Partition.read"]  # fmt: skip
    bad = ["broker/purgatory_nope.py", "log/records/", "broker.purgatory.Purgatory.no_such_method",
           "Purgatory.no_such_method", "odradek.cli:nope", "replication.no_module.thing",
           "python -m log.no_bench", "nothing_here.py", "docs/NOTHING.md"]  # fmt: skip
    assert [t for t in good if _problem(doc, t)] == []
    assert [t for t in bad if not _problem(doc, t)] == []


# --- nothing points outside the repository ------------------------------------------------------------------

_OUTSIDE = re.compile(
    "|".join(
        (
            r"\bSTYLE\.md",
            r"\bDESIGN\.md",
            r"(?<!docs/)\bINTERFACE\.md",
            r"shared\s+notes",
            r"\.\./shared\b",
            r"/work/" + "shared",
        )
    )
)


def test_no_file_refers_to_notes_outside_the_repository() -> None:
    me = Path(__file__).resolve()
    hits = []
    for name in _tracked_files():
        path = ROOT / name
        if path == me:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


def test_the_outside_pattern_matches_what_it_must() -> None:
    # the last two are assembled so that this file itself names no outside location
    outside = ["(STYLE.md §2)", "see DESIGN.md", "fixed by INTERFACE.md", " ".join(("of the", "shared", "notes")),
               "../" + "shared/x"]  # fmt: skip
    inside = ["(docs/CONVENTIONS.md §2)", "docs/INTERFACE.md", "docs/ARCHITECTURE.md", "broker/group/PROTOCOL.md"]
    assert [line for line in outside if not _OUTSIDE.search(line)] == []
    assert [line for line in inside if _OUTSIDE.search(line)] == []
