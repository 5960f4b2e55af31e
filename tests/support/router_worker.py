"""A proxy's per-request work on a :class:`SessionRouter`, and a worker process that does it on command.

``serve_one`` is what ``serve`` does with one request (without the HTTP): route the client's full history
under its key, end the previous turn when a person spoke, run ``before_request``, take the compacted view
to send, and calibrate with what the upstream reports for it. ``worker`` runs a router on its own store
connection in a child process (multiprocessing, spawn) and answers commands sent over a pipe, so tests can
make several processes share one store the way several ``serve`` processes do.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson

from microcompact.config import parse_config
from microcompact.messages import Message
from microcompact.router import SessionRouter
from microcompact.store import PostgresStore, SQLiteStore

# What the scripted upstream "counts" beyond the view (tool schemas, a system prompt): a fixed overhead.
UPSTREAM_OVERHEAD = 1500


def open_store(kind: str, target: str) -> Any:
    return SQLiteStore(target, busy_timeout=5.0) if kind == "sqlite" else PostgresStore(target, busy_timeout=5.0)


def serve_one(router: SessionRouter, key: str, history: list[Message]) -> dict[str, Any]:
    """One request: the compacted view sent upstream (a digest of it) and where it went."""
    with router.lock(key):
        routed = router.route(key, history)
        session = routed.session
        if routed.sync.human and routed.sync.matched:
            session.finalize_turn()
        session.before_request()
        view = session.messages
        session.record_usage(session.tokens + UPSTREAM_OVERHEAD)
        return {
            "session": session.session_id,
            "view": hashlib.blake2b(orjson.dumps(view, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest(),
            "messages": len(view),
            "occupancy": session.occupancy_pct(),
            "forked_from": routed.forked_from,
        }


def worker(kind: str, target: str, config: dict[str, Any], conn: Any) -> None:
    """Serve commands from ``conn`` until "stop": ("request", key, history) -> serve_one's answer;
    ("hold", key, history) routes the history, says "held" and then sleeps inside the lock (to be killed)."""
    store = open_store(kind, target)
    router = SessionRouter(parse_config(config), store=store, shared=True, lock_timeout=30.0)
    try:
        while True:
            command = conn.recv()
            if command[0] == "stop":
                conn.send("stopped")
                return
            if command[0] == "request":
                try:
                    conn.send(serve_one(router, command[1], command[2]))
                except Exception as exc:  # the test reports it
                    conn.send({"error": f"{type(exc).__name__}: {exc}"})
            elif command[0] == "hold":
                with router.lock(command[1]):
                    router.route(command[1], command[2])
                    conn.send("held")
                    time.sleep(3600)
    finally:
        router.close()
        store.close()
