"""Writing compaction events: each pass one transaction whose size follows the event, never the transcript.

Every event (micro ``Absorb``/``Rewrite``, batch ``Prune``/``BatchCompact``) is checked against the stored
rows (still active, at the positions the caller believes) and then written by one generic :meth:`_apply`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..events import Absorb, BatchCompact, Event, Prune, Rewrite
from ..messages import Message
from .base import _SQLBase
from .codec import POS_KEY, ROW_KEY, _Encoded, _row_of
from .errors import StoreConflict


class _CompactionWrites(_SQLBase):
    """``archive_and_compact`` and the row checks and writes behind it (backend-neutral SQL)."""

    def archive_and_compact(self, session_id: str, event: Event, messages: Sequence[Message]) -> int:
        """Persist a compaction event in one transaction, before the caller applies it in memory.

        ``Absorb``: ``messages[i]`` for i in ``event.absorbed`` become 'absorbed' (pointing at the new
        marker), the replaced micro marker (``messages[event.removed_marker]``) becomes 'superseded', and
        ``event.marker`` is inserted as an active row at the position of the last absorbed message, or of
        the replaced marker when the span holds it and it came later (kept user messages and in-use
        iterations inside the span have smaller positions and stay before it). ``Rewrite``: the marker
        at ``messages[event.index]`` is superseded by ``event.marker`` at the same position.

        Raises ValueError when a referenced message was never stored (flush with :meth:`append` first) or
        the marker was already stored, and :class:`StoreConflict` when a referenced row is no longer active
        (another writer on this session, or a stale in-memory view); nothing is written then. On success
        ``_pos`` and ``_row`` are set on ``event.marker``. Returns the number of message rows written
        (updated or inserted): proportional to the event, never to the transcript.
        """
        self._check_id(session_id)
        if isinstance(event, (Prune, BatchCompact)):
            return self._archive_batch(session_id, event, messages)
        if isinstance(event, Absorb):
            if not event.absorbed:
                raise ValueError("Absorb event absorbs no message")
            absorbed = [messages[i] for i in event.absorbed]
            replaced = [messages[event.removed_marker]] if event.removed_marker is not None else []
            absorb_rows = [_row_of(m, f"message {i}") for i, m in zip(event.absorbed, absorbed, strict=False)]
            supersede_rows = [_row_of(m, f"marker {event.removed_marker}") for m in replaced]
            anchor = absorb_rows[-1]
            inside = supersede_rows if event.removes_marker_inside else []
            expect = absorbed + replaced
        elif isinstance(event, Rewrite):
            replaced = [messages[event.index]]
            absorb_rows = []
            supersede_rows = [_row_of(replaced[0], f"marker {event.index}")]
            anchor = supersede_rows[0]
            inside = []
            expect = replaced
        else:
            raise TypeError(f"unknown compaction event {type(event).__name__}")
        marker = event.marker
        if not isinstance(marker, dict) or ROW_KEY in marker:
            raise ValueError("the event's marker is already stored; build a new marker message")
        rows = absorb_rows + supersede_rows
        if len(set(rows)) != len(rows):
            raise ValueError("the event references the same stored row twice")
        expected_pos = {_row_of(m, "message"): m.get(POS_KEY) for m in expect}

        def txn(cur: Any) -> tuple[int, int, list[int]]:
            if not self._touch_session(cur, session_id, create=False):
                raise StoreConflict(f"{self.describe()}: session {session_id!r} does not exist")
            found = self._lock_rows(cur, session_id, rows, expected_pos, markers=supersede_rows)
            # The marker goes after every kept message of the span: where its last absorbed row was, or
            # where the old marker was when the span holds it and it came later (a kept-zone fold).
            position = max(found[r] for r in [anchor, *inside])
            written, ids = self._apply(
                cur,
                session_id,
                absorb=absorb_rows,
                supersede=[(r, 0) for r in supersede_rows],
                insert=[(position, marker)],
            )
            return written, position, ids

        written, position, ids = self._txn(txn, write=True, op="store a micro-compaction pass")
        marker[POS_KEY] = position
        marker[ROW_KEY] = ids[0]
        return written

    def _archive_batch(self, session_id: str, event: Prune | BatchCompact, messages: Sequence[Message]) -> int:
        """Batch compaction's events, through the same generic write.

        ``Prune``: each replaced message (an old tool output, a call with oversized arguments) is absorbed by
        its stub, inserted at the same position, so the original stays searchable and expandable.
        ``BatchCompact``: each new batch marker absorbs the rows of its run (old markers included) and takes
        the lowest position they free, so it sits where its run was; the kept rows (user messages, an
        untouched earlier marker) are only checked: they stay active at their positions, same rows, same ids.
        """
        if isinstance(event, Prune):
            return self._archive_prune(session_id, event, messages)
        groups = [([_row_of(messages[i], f"message {i}") for i in src], marker) for marker, src in event.markers]
        kept_rows = [_row_of(messages[i], f"message {i}") for i in event.kept]
        if not groups:
            raise ValueError("BatchCompact event writes no batch marker")
        if any(not isinstance(m, dict) or ROW_KEY in m for _, m in groups):
            raise ValueError("the event's new messages are already stored; build new message dicts")
        rows = [r for group, _ in groups for r in group] + kept_rows
        if len(set(rows)) != len(rows):
            raise ValueError("the event references the same stored row twice")
        indexes = list(event.absorbed) + list(event.kept)
        expected_pos = {_row_of(messages[i], "message"): messages[i].get(POS_KEY) for i in indexes}

        def txn(cur: Any) -> tuple[int, list[int], list[int]]:
            if not self._touch_session(cur, session_id, create=False):
                raise StoreConflict(f"{self.describe()}: session {session_id!r} does not exist")
            found = self._lock_rows(cur, session_id, rows, expected_pos)
            written, ids, positions = 0, list[int](), list[int]()
            for group, marker in groups:  # absorbing a run frees its positions; its marker takes the first
                position = min(found[r] for r in group)
                n, new_ids = self._apply(cur, session_id, absorb=group, insert=[(position, marker)])
                written, ids, positions = written + n, ids + new_ids, [*positions, position]
            return written, ids, positions

        written, ids, positions = self._txn(txn, write=True, op="store a batch compaction")
        for (_, m), row, pos in zip(groups, ids, positions, strict=False):
            m[POS_KEY], m[ROW_KEY] = pos, row
        return written

    def _archive_prune(self, session_id: str, event: Prune, messages: Sequence[Message]) -> int:
        """Each replaced message is absorbed by its replacement, inserted at the same position."""
        pairs = [(_row_of(messages[i], f"message {i}"), new) for i, new in event.replacements]
        rows = [r for r, _ in pairs]
        if any(not isinstance(m, dict) or ROW_KEY in m for _, m in pairs):
            raise ValueError("the event's new messages are already stored; build new message dicts")
        if len(set(rows)) != len(rows):
            raise ValueError("the event references the same stored row twice")
        expected_pos = {_row_of(messages[i], "message"): messages[i].get(POS_KEY) for i, _ in event.replacements}

        def txn(cur: Any) -> tuple[int, list[int], list[int]]:
            if not self._touch_session(cur, session_id, create=False):
                raise StoreConflict(f"{self.describe()}: session {session_id!r} does not exist")
            found = self._lock_rows(cur, session_id, rows, expected_pos)
            written, ids, positions = 0, list[int](), list[int]()
            for row, new in pairs:
                n, new_ids = self._apply(cur, session_id, absorb=[row], insert=[(found[row], new)])
                written, ids, positions = written + n, ids + new_ids, [*positions, found[row]]
            return written, ids, positions

        written, ids, positions = self._txn(txn, write=True, op="store a batch compaction")
        for (_, m), row, pos in zip(pairs, ids, positions, strict=False):
            m[POS_KEY], m[ROW_KEY] = pos, row
        return written

    def _lock_rows(
        self, cur: Any, session_id: str, rows: Sequence[int], expected_pos: dict[int, Any], markers: Sequence[int] = ()
    ) -> dict[int, int]:
        """Check (inside the writer's transaction) that ``rows`` are active rows of the session at the
        positions the caller believes; ``markers`` must be marker rows. Returns row -> position."""
        sql = f"SELECT id, session_id, position, state, is_marker FROM messages WHERE {self._ids('id')}"
        found = {int(r[0]): r for r in self._exec(cur, sql, (self._ids_param(rows),)).fetchall()}
        where = self.describe()
        for row in rows:
            r = found.get(row)
            if r is None or r[1] != session_id:
                raise StoreConflict(
                    f"{where}: row {row} is not a message of session {session_id!r} (stale in-memory view?)"
                )
            if r[3] != "active":
                raise StoreConflict(
                    f"{where}: row {row} of session {session_id!r} is already {r[3]}: another "
                    "writer compacted this session, or the in-memory transcript is stale"
                )
            exp = expected_pos.get(row)
            if exp is not None and int(exp) != int(r[2]):
                raise StoreConflict(
                    f"{where}: row {row} is at position {r[2]} in the store but {exp} in memory (stale in-memory view)"
                )
        for row in markers:
            if not found[row][4]:
                raise StoreConflict(f"{where}: row {row} is not a marker; refusing to supersede it")
        return {row: int(found[row][2]) for row in rows}

    def _apply(
        self,
        cur: Any,
        session_id: str,
        *,
        absorb: Sequence[int] = (),
        supersede: Sequence[tuple[int, int]] = (),
        insert: Sequence[tuple[int, Message]] = (),
        absorbed_by: int = 0,
    ) -> tuple[int, list[int]]:
        """The generic write of any compaction event, inside the caller's transaction.

        ``absorb``: rows summarized away ('absorbed', ``absorbed_by`` -> the inserted row ``insert[absorbed_by]``).
        ``supersede``: (row, i) pairs, rows replaced by the inserted row ``insert[i]`` ('superseded'): old
        markers.
        ``insert``: (position, message) pairs inserted as active rows (the positions must be free once the
        rows above left the active state). The caller has locked the session and validated the rows.
        Statements: one UPDATE per target state, one INSERT per new row, one UPDATE per replacing row.
        Returns (message rows written, ids of the inserted rows in ``insert`` order).
        """
        encoded = [(pos, _Encoded(m, f"inserted message {i}")) for i, (pos, m) in enumerate(insert)]
        for state, ids in (("absorbed", list(absorb)), ("superseded", [r for r, _ in supersede])):
            if not ids:
                continue
            self._exec(
                cur,
                f"UPDATE messages SET state = ?, updated_at = {self.NOW} WHERE {self._ids('id')} "
                f"AND {self._by_id_only('session_id')} = ? AND {self._by_id_only('state')} = 'active'",
                (state, self._ids_param(ids), session_id),
            )
            if cur.rowcount != len(ids):
                raise StoreConflict(f"{self.describe()}: rows of session {session_id!r} changed during the transaction")
        new_ids = self._insert_rows(cur, session_id, encoded)
        links: dict[int, list[int]] = {}
        if absorb:
            links.setdefault(new_ids[absorbed_by], []).extend(absorb)
        for row, i in supersede:
            links.setdefault(new_ids[i], []).append(row)
        for new_id, rows in links.items():
            self._exec(
                cur, f"UPDATE messages SET absorbed_by = ? WHERE {self._ids('id')}", (new_id, self._ids_param(rows))
            )
        return len(absorb) + len(supersede) + len(encoded), new_ids
