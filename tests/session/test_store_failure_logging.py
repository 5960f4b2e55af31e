"""A store that keeps failing (a server down, a lost writer lease) is logged once, not at every hook, and
the pending messages are stored when it comes back."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from microcompact import Session, SessionBusy, open_store
from microcompact.config import parse_config


class Flaky:
    """A real SQLite store whose appends fail while ``down`` is set."""

    def __init__(self, path: Path) -> None:
        self.inner = open_store(str(path))
        self.down: Exception | None = None

    def append(self, session_id: str, messages: Any) -> None:
        if self.down is not None:
            raise self.down
        self.inner.append(session_id, messages)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def store_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "Session store" in r.getMessage()]


def test_a_store_that_stays_down_is_logged_once_and_catches_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Flaky(tmp_path / "s.db")
    session = Session.open(store, "s", parse_config({"compression": {"micro_compact": True}}))  # type: ignore[arg-type]
    caplog.set_level(logging.DEBUG, logger="microcompact")
    store.down = SessionBusy("session 's' is held by another writer")
    for i in range(6):
        session.append({"role": "user", "content": f"request {i}"})
        session.append({"role": "assistant", "content": f"answer {i}"})
        session.finalize_turn()
    assert len(store_errors(caplog)) == 1  # not one per hook
    store.down = OSError("disk full")  # another failure is news: logged again
    session.finalize_turn()
    session.append({"role": "user", "content": "one more"})
    session.finalize_turn()
    assert len(store_errors(caplog)) == 2
    store.down = None
    session.finalize_turn()
    assert any("writes succeed again" in r.getMessage() for r in caplog.records)
    stored = [m["content"] for m in store.inner.load_active("s")]
    assert stored == [m["content"] for m in session.transcript]  # nothing lost, nothing twice
    assert "request 5" in stored and "one more" in stored
    session.close()
    store.inner.close()
