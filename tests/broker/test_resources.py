"""The broker raises its open files limit at start (issue 15: a request must not exhaust descriptors), and keeps the
memory its threads free instead of handing it back to the system after every request (issue 20)."""

from __future__ import annotations

import resource
import subprocess
import sys


def test_the_soft_open_files_limit_goes_up_to_the_hard_one() -> None:
    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    code = (
        "import resource; from broker.resources import raise_open_files_limit; "
        "print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=low_soft_limit, capture_output=True, text=True,
                         timeout=30, check=True)  # fmt: skip
    soft, hard, now_soft, now_hard = map(int, out.stdout.split())
    assert (soft, hard) == (now_soft, now_hard)
    assert soft == hard >= 4096  # the hard limit itself goes higher where the process may raise it


def test_the_allocator_keeps_freed_memory_where_glibc_takes_the_setting() -> None:
    """glibc takes both thresholds (``mallopt`` answers 1); after that, freeing a 1 MiB block (below the mmap
    threshold now, so it comes from the heap) at the top of the heap no longer hands memory back: no ``madvise``
    or ``brk`` shrink, which shows as the process's resident size staying where it was."""
    code = """
import ctypes, os
from broker.resources import keep_freed_heap
assert keep_freed_heap() is True
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks = [libc.malloc(1 << 20) for _ in range(32)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
touched = resident()
for b in reversed(blocks):
    libc.free(b)
print(touched, resident())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    touched, after = map(int, out.stdout.split())
    assert after >= touched - (2 << 20), f"freed memory went back to the system: {touched} -> {after} bytes resident"
