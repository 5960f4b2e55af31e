"""What the store must hold after a proxy session survived restarts of ``serve``: the one session (never
forked), every message of the client's history stored once, in the client's order, and the markers the
killed servers had sent still there, once each, for the next server to build on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from microcompact.identity import HID_KEY
from microcompact.store import open_store
from support.anthropic_contract import marker_texts


def stored_session_errors(
    db: Path,
    session_id: str,
    history_len: int | None,
    markers_sent: list[str],
    all_sessions: set[str] | None = None,
) -> list[str]:
    """``history_len``: messages in the client's last request (None: a fork, whose opening its parent
    holds); ``markers_sent``: marker texts that went upstream before a restart; ``all_sessions``: every
    session the store must list (default: this one alone)."""
    with open_store(db) as store:
        listed = {r["id"] for r in store.list_sessions()}
        stored = store.export(session_id, include_absorbed=True) if session_id in listed else []
    expected = all_sessions or {session_id}
    errors = [] if listed == expected else [f"sessions {sorted(listed)}, expected {sorted(expected)}"]
    originals = [m for m in stored if HID_KEY in m and not m.get("_mc")]
    positions = [m[HID_KEY] for m in originals]
    if positions != sorted(positions):
        errors.append("the client's messages are not stored in its order")
    missing = sorted(set(range(history_len)) - set(positions)) if history_len is not None else []
    extra = sorted(set(positions) - set(range(history_len))) if history_len is not None else []
    if missing or extra:
        errors.append(f"client messages {missing[:10]} not stored; positions beyond the history: {extra[:10]}")
    parts = Counter((m[HID_KEY], m["role"], json.dumps(m.get("content"), sort_keys=True)) for m in originals)
    twice = sorted({key[0] for key, count in parts.items() if count > 1})
    if twice:
        errors.append(f"client messages {twice[:10]} stored more than once")
    stored_markers = Counter(t for m in stored if m.get("_mc") for t in marker_texts([m]))
    lost = [t[:80] for t in markers_sent if stored_markers[t] != 1]
    if lost:
        errors.append(f"markers sent before a restart not stored exactly once: {lost}")
    return errors


__all__ = ["stored_session_errors"]


def normalized_export(store: Any, session_id: str) -> list[dict[str, Any]]:
    """Every stored row of the session (absorbed ones too), with row ids replaced by their place in the
    export: what must be the same whichever process wrote it."""
    rows = store.export(session_id, include_absorbed=True)
    place = {m["_row"]: i for i, m in enumerate(rows)}
    out = []
    for m in rows:
        m = {k: v for k, v in m.items() if k != "_row"}
        if "_absorbed_by" in m:
            m["_absorbed_by"] = place[m["_absorbed_by"]]
        out.append(m)
    return out
