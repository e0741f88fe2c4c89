"""The boundary between ``RecordFuture`` and CPython's ``concurrent.futures`` (``odradek/record_future.py``,
module docstring): a record's future does not run ``Future.__init__``, overrides every public method of
``Future``, and provides only ``_condition``, ``_state`` and ``_waiters`` for ``concurrent.futures.wait``
and ``as_completed``, completing their waiters with ``add_result`` and ``add_exception``.

These tests read the source of the running Python's ``concurrent.futures._base`` and fail, naming what
changed, on a Python whose futures use other internals: then ``odradek/record_future.py`` must be revisited.
The behaviour itself (result, callbacks, wait, as_completed) is tested in tests/clients/test_accumulator.py.
"""

from __future__ import annotations

import ast
import concurrent.futures
import inspect
import textwrap
from collections.abc import Callable
from concurrent.futures import _base

from odradek.record_future import RecordFuture

# What wait() and as_completed() may touch of a future that is not public API.
PROVIDED_PRIVATE = {"_condition", "_state", "_waiters"}


def _tree(obj: Callable[..., object] | type) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


def _private_attributes(obj: Callable[..., object] | type) -> set[str]:
    """Every ``x._name`` (not dunder) read or written in ``obj``'s source."""
    return {
        node.attr
        for node in ast.walk(_tree(obj))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    }


def test_wait_and_as_completed_use_only_the_provided_internals() -> None:
    assert concurrent.futures.wait is _base.wait
    assert concurrent.futures.as_completed is _base.as_completed
    used: dict[str, set[str]] = {}
    for helper in (_base.wait, _base.as_completed, _base._AcquireFutures, _base._create_and_install_waiters,
                   _base._yield_finished_futures):  # fmt: skip
        used[helper.__name__] = _private_attributes(helper)
    helpers = {
        node.id
        for fn in (_base.wait, _base.as_completed)
        for node in ast.walk(_tree(fn))
        if isinstance(node, ast.Name) and node.id.startswith("_") and callable(getattr(_base, node.id, None))
    }
    assert helpers <= set(used), f"wait/as_completed call other private helpers: {sorted(helpers - set(used))}"
    unexpected = {name: attrs - PROVIDED_PRIVATE for name, attrs in used.items() if attrs - PROVIDED_PRIVATE}
    assert not unexpected, f"concurrent.futures now uses private future attributes RecordFuture lacks: {unexpected}"


def test_the_states_compared_are_the_ones_record_future_reports() -> None:
    source = inspect.getsource(_base.wait) + inspect.getsource(_base.as_completed)
    assert "f._state in [CANCELLED_AND_NOTIFIED, FINISHED]" in source, "wait/as_completed test the state otherwise"
    assert (_base.PENDING, _base.FINISHED) == ("PENDING", "FINISHED")


def _waiter_calls(method: Callable[..., object]) -> set[str]:
    """The methods ``method`` calls on each element of ``self._waiters``."""
    tree = _tree(method)
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and ast.unparse(n.iter) == "self._waiters"]
    assert len(loops) == 1, f"{method.__qualname__} no longer loops once over self._waiters"
    target = ast.unparse(loops[0].target)
    return {
        node.func.attr
        for node in ast.walk(loops[0])
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value) == target
    }


def test_completing_a_future_tells_its_waiters_as_record_future_does() -> None:
    assert _waiter_calls(_base.Future.set_result) == {"add_result"}
    assert _waiter_calls(_base.Future.set_exception) == {"add_exception"}
    for waiter in (_base._AsCompletedWaiter, _base._FirstCompletedWaiter, _base._AllCompletedWaiter):
        assert callable(getattr(waiter, "add_result", None)), waiter
        assert callable(getattr(waiter, "add_exception", None)), waiter


def test_every_public_method_of_future_is_overridden() -> None:
    """None of Future's own methods may run on a RecordFuture: they would read state it does not have."""
    future_class = vars(concurrent.futures.Future)
    public = {name for name, value in future_class.items() if callable(value) and not name.startswith("_")}
    assert public >= {"result", "exception", "add_done_callback", "done", "cancel"}
    missing = sorted(name for name in public | {"__repr__"} if name not in vars(RecordFuture))
    assert not missing, f"Future methods RecordFuture does not override: {missing}"
