"""The leader's instructions per acks=all record at RF 3: ``tests.bench.leader_cycle`` counted by valgrind.

    python -m tests.bench.leader_instructions [--short 150] [--long 400] [--tree NAME:PATH ...] [--json]

``tests.bench.leader_cycle`` measures the leader's CPU time a cycle, which moves by ±20% from one run to the
next on a shared 2-core machine: a change of a few percent on the leader's path drowns in it. This counts
instructions instead (valgrind's callgrind, ``I refs``), which repeat to within a fraction of a percent. Each
checkout runs the cycle bench twice under callgrind, with ``--short`` and ``--long`` cycles (each run does as
many cycles again to warm up), and the difference of the two counts over the difference of the cycles is
the instructions of one cycle: the interpreter's start, the imports and the set-up cancel out (each checkout
runs the bench once outside valgrind first, so that no counted run compiles bytecode). ``--tree
NAME:PATH`` adds the checkout at PATH (run with its own ``.venv`` when it has one), so a change is measured
against its base in one run; the runs go two at a time (one per core). Under callgrind a cycle takes ~50
times as long (a run of 400 cycles ~1.5 min). An instruction is not a microsecond (cache misses, system calls,
other processes): this is for comparing two versions of the same path, the CPU bench (``tests.bench.cpu``)
and the comparison (``tests.bench.compare``) say what the running cluster does. Needs valgrind (installed
with apt when missing). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.bench.systems import tree_python
from tests.support.apt import apt_install

ROOT = Path(__file__).resolve().parents[2]
REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
RUN_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Tree:
    name: str
    path: Path

    @property
    def python(self) -> str:
        return tree_python(self.path)


def instructions(output: str) -> int:
    """The total of callgrind's ``I refs`` line in ``output`` (ValueError when there is none)."""
    found = REFS.search(output)
    if found is None:
        raise ValueError("no 'I refs' line in valgrind's output")
    return int(found.group(1).replace(",", ""))


def per_cycle(short: tuple[int, int], long: tuple[int, int]) -> float:
    """Instructions a cycle from two runs ``(cycles, instructions)``; each run did its cycles twice (the
    warm-up and the measured ones)."""
    (short_cycles, short_refs), (long_cycles, long_refs) = short, long
    if long_cycles <= short_cycles:
        raise ValueError(f"the long run ({long_cycles} cycles) must be longer than the short one ({short_cycles})")
    return (long_refs - short_refs) / (2 * (long_cycles - short_cycles))


def count(tree: Tree, cycles: int) -> int:
    """The instructions of one ``leader_cycle --cycles cycles --repeat 1`` run in ``tree`` under callgrind."""
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", tree.python, "-m",
            "tests.bench.leader_cycle", "--cycles", str(cycles), "--repeat", "1"]  # fmt: skip
    done = subprocess.run(argv, cwd=tree.path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        last = "\n".join([line for line in done.stderr.splitlines() if not line.startswith("==")][-5:])
        raise RuntimeError(f"{tree.name}: leader_cycle --cycles {cycles} failed ({done.returncode}): {last}")
    return instructions(done.stderr)


def warm(tree: Tree) -> None:
    """One short ``leader_cycle`` run in ``tree`` outside valgrind, so that its modules' bytecode is compiled
    and cached before the counted runs: in a fresh checkout both counted runs compiled it, each for itself,
    and the compilation (~14 G instructions) swamped the difference of the two."""
    argv = [tree.python, "-m", "tests.bench.leader_cycle", "--cycles", "5", "--repeat", "1"]
    done = subprocess.run(argv, cwd=tree.path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree.name}: leader_cycle --cycles 5 failed ({done.returncode}): {done.stderr[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.leader_instructions",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--short", type=int, default=150, help="cycles of the short run (default 150)")
    parser.add_argument("--long", type=int, default=400, help="cycles of the long run (default 400)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME:PATH",
                        help="a checkout to measure too (ratios are against this one)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object as the last line")
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error(f"need 0 < --short < --long, got {args.short} and {args.long}")
    trees = [Tree("this", ROOT)]
    for item in args.tree:
        name, sep, path = item.partition(":")
        if not sep or not name or not path:
            parser.error(f"--tree takes NAME:PATH, not {item!r}")
        if not (Path(path) / "tests" / "bench" / "leader_cycle.py").exists():
            parser.error(f"--tree {item}: {path} has no tests/bench/leader_cycle.py")
        trees.append(Tree(name, Path(path).resolve()))
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: installing it with apt-get", file=sys.stderr, flush=True)
        why = apt_install(["valgrind"])
        if why is not None:
            print(f"cannot count instructions without valgrind: {why}", file=sys.stderr)
            return 2
    try:
        for tree in trees:
            warm(tree)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"a warm-up run failed: {exc}", file=sys.stderr)
        return 1
    jobs = [(tree, cycles) for tree in trees for cycles in (args.short, args.long)]
    started = time.monotonic()
    print(f"{len(jobs)} runs under callgrind, two at a time ({args.short} and {args.long} cycles per checkout)",
          file=sys.stderr, flush=True)  # fmt: skip
    refs: dict[tuple[str, int], int] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {pool.submit(count, tree, cycles): (tree.name, cycles) for tree, cycles in jobs}
        for future, (name, cycles) in futures.items():
            try:
                refs[(name, cycles)] = future.result()
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                print(f"a run failed: {exc}", file=sys.stderr)
                return 1
            print(f"[{time.monotonic() - started:5.0f} s] {name}, {cycles} cycles: {refs[(name, cycles)]:,} "
                  "instructions", file=sys.stderr, flush=True)  # fmt: skip
    results = {
        tree.name: per_cycle((args.short, refs[(tree.name, args.short)]), (args.long, refs[(tree.name, args.long)]))
        for tree in trees
    }
    wrong = {name: value for name, value in results.items() if value <= 0}
    if wrong:  # the long run counted no more than the short one: something else ran in one of them
        print(f"the runs disagree: {', '.join(f'{n} {v / 1e6:.3f} M a cycle' for n, v in wrong.items())}",
              file=sys.stderr)  # fmt: skip
        return 1
    baseline = results["this"]
    print("the leader's instructions per acks=all record at RF 3 (tests.bench.leader_cycle under callgrind; "
          f"{args.short} and {args.long} cycles)")  # fmt: skip
    for name, value in results.items():
        print(f"  {name:<12} {value / 1e6:8.3f} M a cycle   {value / baseline:6.3f}x this")
    if args.json:
        print(json.dumps({"short": args.short, "long": args.long, "per_cycle": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
