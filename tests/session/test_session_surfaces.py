"""AsyncSession cannot drift from Session: every public hook of one is a hook of the other, with the same
parameters, except the few a router or the proxy needs (named here, each with why)."""

from __future__ import annotations

import inspect

from microcompact import AsyncSession, Session

# What a router or the proxy asks of a Session, not an agent loop: the multi-process hand-off (hand_over,
# take_lease, abandon), the bill's figures (note_fold, cache_totals, take_spent) and the background
# worker's passes for inspection.
SESSION_ONLY = {"hand_over", "take_lease", "abandon", "note_fold", "cache_totals", "take_spent", "background"}
# Wrapping an existing Session is AsyncSession's own way in.
ASYNC_ONLY = {"wrap"}
# Session keeps these as plain attributes; AsyncSession reads them through to its session.
ATTRIBUTES = {"config", "session_id", "summarizer", "store"}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _parameters(cls: type, name: str) -> list[tuple[str, object, object]]:
    """The parameters of ``cls.name`` past ``self``/``cls``: name, kind and default."""
    member = inspect.getattr_static(cls, name)
    function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
    params = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in params]


def _drift(sync: type, wrapper: type) -> set[str]:
    """Public names one of the two has and the other lacks, past the named exceptions."""
    return (_public(sync) - SESSION_ONLY) ^ (_public(wrapper) - ASYNC_ONLY - ATTRIBUTES)


def test_async_session_has_every_session_hook_and_nothing_else() -> None:
    assert _drift(Session, AsyncSession) == set()


def test_the_surface_check_sees_a_hook_one_side_lacks() -> None:
    class Ahead(Session):
        def look_ahead(self) -> None: ...

    assert _drift(Ahead, AsyncSession) == {"look_ahead"}


def test_the_shared_hooks_take_the_same_parameters() -> None:
    for name in sorted(_public(Session) & _public(AsyncSession)):
        member = inspect.getattr_static(Session, name)
        if isinstance(member, property):
            assert isinstance(inspect.getattr_static(AsyncSession, name), property), name
            continue
        assert _parameters(Session, name) == _parameters(AsyncSession, name), name


def test_a_hook_that_does_work_is_awaited_on_async_session() -> None:
    """Only queueing messages and reading the view never wait; everything else runs on the worker."""
    never_waits = {"append", "extend", "occupancy_pct"}
    for name in sorted(_public(Session) & _public(AsyncSession)):
        member = inspect.getattr_static(AsyncSession, name)
        if isinstance(member, property):
            continue
        function = member.__func__ if isinstance(member, classmethod) else member
        assert inspect.iscoroutinefunction(function) == (name not in never_waits), name
