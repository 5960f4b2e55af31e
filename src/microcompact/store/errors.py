"""The store's errors: each names the database, the operation that failed and what is wrong.

Errors never carry the database's own text (it can quote a statement's parameters: message content,
secrets): a :class:`StoreError` names the database, the operation and the driver's error class and code.
"""

from __future__ import annotations


class StoreError(Exception):
    """A store problem, phrased for the user (names the database and what is wrong)."""


class StoreConflict(StoreError):
    """The store changed under this writer: another writer on the session, or a stale in-memory view."""


class StoreLocked(StoreError):
    """Another connection held the database (or the session) for longer than the busy timeout."""


class SessionBusy(StoreError):
    """Another writer holds the session's lease (or this writer lost it): two writers would mix the session."""


class StoreReadOnly(StoreError):
    """A write to a store opened read-only or living on a read-only file or server."""


class StoreFull(StoreError):
    """The disk (or the database's size limit) is full."""


class StoreCorrupt(StoreError):
    """The file is not a SQLite database, or its contents are damaged."""


def _driver_error(exc: BaseException) -> str:
    """What a driver error may say in our messages and logs: its class and code, never its text (a database's
    error text can quote the statement's parameters: message content, secrets)."""
    code = (
        getattr(exc, "sqlstate", None)
        or getattr(exc, "sqlite_errorname", None)
        or getattr(exc, "sqlite_errorcode", None)
    )
    return f"{type(exc).__module__.split('.')[0]}.{type(exc).__name__}" + (f" {code}" if code else "")
