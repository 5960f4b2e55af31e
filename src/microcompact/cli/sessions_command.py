"""``microcompact sessions``: what the store holds, read-only (list, show, search absorbed originals, export),
and ``rewrite``, the one write: ``serve --audit``'s switch that turns rewriting on for one conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..keys import META_KEY, POS_KEY, ROW_KEY
from ..render import content_text
from ..store import (
    PostgresStore,
    SQLiteStore,
    StoreError,
    check_location,
    default_store_path,
    is_postgres,
    open_store,
    sqlite_path,
)
from .base import DbOption, check_name, fail, out
from .output import export_form

MAX_ID_WIDTH = 80  # the widest session column `sessions list` keeps whole before it shortens ids
MAX_SEARCH_LIMIT = 10_000
MAX_CANDIDATES = 5  # sessions an ambiguous prefix names in its error


sessions_app = typer.Typer(
    help="Sessions in the store: list, show, search absorbed originals, export.", no_args_is_help=True
)


def _store(db: str | None) -> SQLiteStore | PostgresStore:
    """The store for a read-only command: it must exist already (a mistyped --db must not create one)."""
    if db is not None:
        try:
            check_location(db)
        except StoreError as exc:
            fail(f"--db: {exc}")
    if db is None or not is_postgres(db):  # a libpq key=value DSN too: never echoed as a "file" name
        path = _sqlite_path(db)
        if path != ":memory:" and not Path(path).is_file():
            fail(f"no session store at {path}")
    try:
        return open_store(db)
    except StoreError as exc:
        fail(str(exc))


def _sqlite_path(db: str | None) -> str:
    """The file a SQLite --db names (as open_store reads it), the default store when None."""
    if db is None:
        return str(default_store_path())
    return sqlite_path(db) or db


def _require_session(store: SQLiteStore | PostgresStore, session_id: str) -> str:
    """The stored session ``session_id`` names: itself, or the one session whose id starts with it (ids are
    long digests: a prefix as ``sessions list`` shows it is enough when no other session shares it)."""
    check_name("SESSION_ID", session_id)
    ids = [str(r["id"]) for r in store.list_sessions()]
    if session_id in ids:
        return session_id
    matching = [i for i in ids if i.startswith(session_id)]
    if len(matching) == 1:
        return matching[0]
    if matching:
        shown = ", ".join(sorted(matching)[:MAX_CANDIDATES])
        more = f" and {len(matching) - MAX_CANDIDATES} more" if len(matching) > MAX_CANDIDATES else ""
        fail(f"{session_id!r} starts {len(matching)} sessions in {store.describe()} ({shown}{more}): give more of it")
    fail(f"no session {session_id!r} in {store.describe()} (nor one whose id starts with it)")


@sessions_app.command("list")
def sessions_list(db: DbOption = None) -> None:
    """Every stored session with its message counts, and the fingerprint of the credential whose
    conversation it is (the proxy's salted digest of the key, never the key; blank for a session the proxy
    did not key, or one of keys shared across credentials)."""
    from ..server.session_key import fingerprint_of  # the proxy's key format (imported on use, as serve is)

    with _store(db) as store:
        rows = store.list_sessions()
    table = Table(title="sessions", title_justify="left")
    left = ("session", "credential", "created", "updated")
    # A session id is shown whole (a Claude Code id with its fingerprint is 53 characters): the dates wrap first.
    longest = min(max((len(str(r["id"])) for r in rows), default=0), MAX_ID_WIDTH)
    for col in ("session", "credential", "created", "updated", "active", "absorbed", "superseded", "markers"):
        table.add_column(
            col, justify="left" if col in left else "right", min_width=longest if col == "session" else None
        )
    for r in rows:
        c = r["counts"]
        table.add_row(
            escape(str(r["id"])),
            fingerprint_of(str(r["id"])) or "",
            str(r["created_at"])[:19],
            str(r["updated_at"])[:19],
            str(c["active"]),
            str(c["absorbed"]),
            str(c["superseded"]),
            str(r["markers"]),
        )
    out.print(table if rows else "no sessions stored")


@sessions_app.command("show")
def sessions_show(
    session_id: str,
    db: DbOption = None,
    full: Annotated[bool, typer.Option("--full", help="Print whole messages, not one line each.")] = False,
) -> None:
    """The active transcript of a session (what the model is sent), one line per message."""
    with _store(db) as store:
        session_id = _require_session(store, session_id)
        messages = store.load_active(session_id)
    table = Table(title=f"session {escape(session_id)}: {len(messages)} active messages", title_justify="left")
    for col in ("pos", "row", "role", "content"):
        table.add_column(col, overflow="fold")
    for m in messages:
        meta = m.get(META_KEY)
        kind = meta.get("marker") if isinstance(meta, dict) else None
        text = content_text(m)
        calls = ", ".join((tc.get("function") or {}).get("name", "?") for tc in m.get("tool_calls") or [])
        line = text if full else " ".join(text.split())[:120]
        if calls:
            line = f"{line} [calls: {calls}]".strip()
        table.add_row(
            str(m.get(POS_KEY)),
            str(m.get(ROW_KEY)),
            f"{m['role']}{' (' + kind + ' marker)' if kind else ''}",
            escape(line),
        )
    out.print(table)


@sessions_app.command("search")
def sessions_search(
    session_id: str,
    query: str,
    db: DbOption = None,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    active: Annotated[bool, typer.Option("--include-active", help="Search active messages too.")] = False,
) -> None:
    """Full-text search over what compaction absorbed: nothing summarized is lost for good."""
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        fail(f"--limit must be between 1 and {MAX_SEARCH_LIMIT}, got {limit}")
    if not query.strip():
        fail("QUERY must not be empty: give the words to search for")
    with _store(db) as store:
        session_id = _require_session(store, session_id)
        hits = store.search(session_id, query, limit=limit, include_active=active)
    if not hits:
        out.print(f"no match for {escape(query)!s} in session {escape(session_id)}")
        raise typer.Exit(1)
    table = Table(title=f"{len(hits)} match(es)", title_justify="left")
    for col in ("row", "pos", "role", "state", "absorbed by", "snippet"):
        table.add_column(col, overflow="fold")
    for h in hits:
        table.add_row(
            str(h["row"]),
            str(h["position"]),
            h["role"],
            h["state"],
            str(h.get("absorbed_by") or ""),
            escape(h["snippet"]),
        )
    out.print(table)


@sessions_app.command("export")
def sessions_export(
    session_id: str,
    db: DbOption = None,
    include_absorbed: Annotated[
        bool, typer.Option("--include-absorbed", help="Also the originals compaction absorbed, in position order.")
    ] = False,
    expand: Annotated[
        int | None, typer.Option("--expand", help="Only the originals the marker with this row id stands for.")
    ] = None,
) -> None:
    """The session as JSONL on stdout (replayable)."""
    if expand is not None and not 0 <= expand < 2**63:
        fail(f"--expand must be a marker's row id (0 to {2**63 - 1}), got {expand}")
    with _store(db) as store:
        session_id = _require_session(store, session_id)
        try:
            messages = (
                store.expand(session_id, expand)
                if expand is not None
                else store.export(session_id, include_absorbed=include_absorbed)
            )
        except (ValueError, StoreError) as exc:
            fail(str(exc))
    for m in messages:
        sys.stdout.write(json.dumps(export_form(m), ensure_ascii=False) + "\n")


@sessions_app.command("rewrite")
def sessions_rewrite(
    session_id: str,
    db: DbOption = None,
    off: Annotated[bool, typer.Option("--off", help="Back to audit: forwarded as the client sent it.")] = False,
) -> None:
    """Under `serve --audit`, forward this conversation's compacted view (rewriting on) from its next request,
    in every serve on this store; --off: back to audit. Without --audit, serve rewrites every conversation."""
    from ..server.ui.switch import switch_rewrite  # the proxy's switch (imported on use, as serve is)

    with _store(db) as store:
        session_id = _require_session(store, session_id)
        try:
            switch_rewrite(store, session_id, not off)
        except KeyError:
            fail(f"no session {session_id!r} in {store.describe()}")
        except StoreError as exc:
            fail(str(exc))
    state = "audit (forwarded as the client sends it)" if off else "rewriting (its compacted view goes upstream)"
    out.print(f"session {escape(session_id)}: {state} from its next request under serve --audit")
