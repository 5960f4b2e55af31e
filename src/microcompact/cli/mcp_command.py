"""``microcompact mcp``: the recall tools (``recall``, ``expand``) as an MCP stdio server over the store.

stdout is the protocol's channel: nothing else is printed there; errors go to stderr as one line.
"""

from __future__ import annotations

from pathlib import Path

from ..store import StoreError, check_location, default_store_path, is_postgres, open_store, sqlite_path
from .base import DbOption, fail


def mcp_cmd(db: DbOption = None) -> None:
    """Serve recall(conversation, query) and expand(conversation, handle) over MCP stdio: the model reads back
    what compaction folded out of its conversation (the summary's note names the conversation)."""
    from ..recall_tools.stdio import serve_stdio  # the mcp SDK loads only for this command

    if db is not None:
        try:
            check_location(db)
        except StoreError as exc:
            fail(f"--db: {exc}")
    if db is None or not is_postgres(db):
        path = str(default_store_path()) if db is None else (sqlite_path(db) or db)
        if not Path(path).is_file():
            fail(f"no session store at {path}: start `microcompact serve` on it first")
    try:
        store = open_store(db, read_only=True)
    except StoreError as exc:
        fail(str(exc))
    try:
        serve_stdio(store)
    finally:
        store.close()
