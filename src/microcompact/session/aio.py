"""AsyncSession: the Session contract for asyncio agents, where a pass never blocks the event loop.

Typical loop::

    session = AsyncSession(load_config(), summarizer_from(AsyncOpenAI(), model="gpt-4o-mini"))
    session.append({"role": "user", "content": prompt})
    while True:
        await session.before_request()
        reply = await client.chat.completions.create(model=..., messages=session.messages)
        await session.record_usage(reply.usage.prompt_tokens)
        session.append(reply.choices[0].message.model_dump(exclude_none=True))
        ...  # run tools, append their results
    await session.finalize_turn()

Everything that reads or changes the engine's state runs on the session's own worker thread, one call at
a time in the order they were awaited, so the event loop never waits for a summarizer, a tokenizer pass
or the store. An async summarizer (``AsyncOpenAI``, ``AsyncAnthropic``, an ``async def``) is bound to the
loop the session is awaited on: the worker submits its coroutines there and waits for them, so the
client's connections stay on the loop they belong to.

``append`` and ``extend`` stay synchronous and never wait: a message is checked at once (a bad one raises
TranscriptError right there) and queued; queued messages enter the transcript, in order, at the start of
the next awaited call (and before ``close`` returns), which is when a plain Session would first write or
compact them too. ``messages``, ``transcript`` and ``tokens`` never wait either: they are the transcript
as the last awaited call left it, plus the queued messages. A background pass that finished meanwhile is
applied by the next awaited call (a plain Session also applies it when ``messages`` is read).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from ..batch import BatchResult
from ..config import Config
from ..messages import Message, disown_marker_text, to_api, validate_message
from ..micro import PassResult
from ..summarizers import Summarizer, bind_event_loop
from ..telemetry import occupancy_pct
from . import Convert, HistorySync, Session

if TYPE_CHECKING:
    from ..store import SessionStore

T = TypeVar("T")


class AsyncSession:
    """One conversation for asyncio code; same arguments and contract as :class:`~microcompact.Session`.

    Constructing one with a store takes the writer lease right away (one short store call); use
    ``await AsyncSession.open(store, session_id)`` to resume a stored session without blocking the loop.
    """

    def __init__(self, config: Config | None = None, summarizer: Summarizer | None = None, **kwargs: Any) -> None:
        self._adopt(Session(config, summarizer, **kwargs))

    @classmethod
    def wrap(cls, session: Session) -> AsyncSession:
        """An AsyncSession driving ``session``, which from now on must be used only through it."""
        wrapper = cls.__new__(cls)
        wrapper._adopt(session)
        return wrapper

    @classmethod
    async def open(
        cls,
        store: SessionStore,
        session_id: str,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        **kwargs: Any,
    ) -> AsyncSession:
        """Resume ``session_id`` from ``store`` (or start it), as :meth:`Session.open`, off the loop."""
        session = await asyncio.to_thread(Session.open, store, session_id, config, summarizer, **kwargs)
        return cls.wrap(session)

    def _adopt(self, session: Session) -> None:
        self.session = session
        self._guard = threading.Lock()  # held only for list operations, never for work
        self._queued: list[Message] = []
        self._view: list[Message] = session.transcript
        self._view_tokens = session.tokens
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"microcompact-{session.session_id}")
        self._closed = False

    # ------------------------------------------------------------------ what the session is

    @property
    def config(self) -> Config:
        return self.session.config

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def summarizer(self) -> Summarizer:
        return self.session.summarizer

    @property
    def store(self) -> SessionStore | None:
        return self.session.store

    @property
    def finalized_row(self) -> int | None:
        """Row of the last message when ``finalize_turn`` last completed (see :class:`Session`)."""
        return self.session.finalized_row

    # ------------------------------------------------------------------ the transcript (never waits)

    def append(self, message: Message) -> None:
        """Queue a message (a deep copy: what was checked is what enters the transcript, whatever the caller
        does to its dict or nested lists afterwards). Raises TranscriptError at once for a message that is
        not a chat message or holds a value JSON cannot (NaN, Infinity)."""
        with self._guard:
            copied = copy.deepcopy(message)
            validate_message(copied, f"message {len(self._view) + len(self._queued)}")
            self._queued.append(copied)

    def extend(self, messages: Iterable[Message]) -> None:
        """Queue several messages, kept together; none is queued when one of them is refused."""
        batch = copy.deepcopy(list(messages))
        with self._guard:
            base = len(self._view) + len(self._queued)
            for i, m in enumerate(batch):
                validate_message(m, f"message {base + i}")
            self._queued += batch

    @property
    def messages(self) -> list[Message]:
        """What to send to the provider: library metadata stripped."""
        with self._guard:
            return to_api(self._view + self._queued)

    @property
    def transcript(self) -> list[Message]:
        """The transcript with library metadata (markers are recognisable): copies."""
        with self._guard:
            return [dict(m) for m in self._view] + [dict(disown_marker_text(m)) for m in self._queued]

    @property
    def tokens(self) -> int:
        with self._guard:
            queued = list(self._queued)
            total = self._view_tokens
        return total + sum(self.session.counter.count_message(m) for m in queued)

    def occupancy_pct(self) -> float | None:
        return occupancy_pct(self.session.counter.estimate_prompt(self.tokens), self.config.threshold_tokens())

    # ------------------------------------------------------------------ full history in, compacted view out

    async def sync_history(self, history: Sequence[Message], convert: Convert | None = None) -> HistorySync:
        """:meth:`Session.sync_history` off the loop: the new suffix of the caller's full history is
        appended (after the messages ``append`` queued). Raises TranscriptError for an invalid new message."""
        history = list(history)  # what the caller holds now, whatever other tasks do to the list meanwhile
        return await self._call(lambda: self.session.sync_history(history, convert))

    async def compacted(self, history: Sequence[Message], convert: Convert | None = None) -> list[Message]:
        """The one call a framework hook needs (:meth:`Session.compacted`): the full history in, the
        compacted view to send out, every pass run off the loop. Raises
        :class:`~microcompact.session.HistoryDiverged` when the history is not this session's."""
        history = list(history)
        return await self._call(lambda: self.session.compacted(history, convert))

    async def fork(
        self,
        session_id: str,
        history: Sequence[Message],
        at: int,
        convert: Convert | None = None,
        store: SessionStore | None = None,
    ) -> AsyncSession:
        """:meth:`Session.fork` off the loop: a new AsyncSession for a history that shares only its first
        ``at`` client messages with this one."""
        history = list(history)
        child = await self._call(lambda: self.session.fork(session_id, history, at, convert, store))
        return AsyncSession.wrap(child)

    # ------------------------------------------------------------------ hooks (awaited, run on the worker)

    async def flush(self) -> bool:
        """Write appended messages to the store; False when the store failed (retried at the next call)."""
        return await self._call(self.session.flush)

    async def record_usage(
        self,
        prompt_tokens: int | None,
        counted_tokens: int | None = None,
        *,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> None:
        """Calibrate token estimates with the provider's ``usage.prompt_tokens`` for the last request
        (``counted_tokens``: what was counted when it was sent), and note what its cache read and wrote
        (see :meth:`Session.record_usage`)."""
        await self._call(
            lambda: self.session.record_usage(
                prompt_tokens,
                counted_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
            )
        )

    async def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return await self._call(lambda: self.session.should_compress(prompt_tokens))

    async def before_request(self, prompt_tokens: int | None = None) -> list[PassResult | BatchResult]:
        """Call before every model request (see :meth:`Session.before_request`). Never raises."""
        return await self._call(lambda: self.session.before_request(prompt_tokens))

    async def compact(self, focus: str | None = None) -> BatchResult:
        """Batch compaction on demand, optionally favouring ``focus`` in the summary."""
        return await self._call(lambda: self.session.compact(focus))

    async def finalize_turn(self, completed: bool = True) -> list[PassResult]:
        """Call after each turn; ``completed=False`` for an interrupted or failed turn. Never raises."""
        return await self._call(lambda: self.session.finalize_turn(completed))

    async def fold_ahead(self) -> None:
        """The client's turn is over: in background mode, start the fold the next request would make (see
        :meth:`Session.fold_ahead`). Never raises."""
        await self._call(self.session.fold_ahead)

    async def drain(self, timeout: float = 60.0) -> list[PassResult]:
        """Wait (off the loop) for a background pass to finish and apply it."""
        return await self._call(lambda: self.session.drain(timeout))

    async def close(self) -> None:
        """Hand over queued messages, finish background work, write what is pending and give up the store's
        writer lease; then stop the worker thread. Closing twice is harmless."""
        if self._closed:
            return
        try:
            await self._call(self.session.close)
        finally:
            self._closed = True
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------ the worker

    async def _call(self, work: Callable[[], T]) -> T:
        if self._closed:
            raise RuntimeError(f"AsyncSession {self.session_id} is closed")
        loop = asyncio.get_running_loop()
        bind_event_loop(self.session.summarizer, loop)
        return await loop.run_in_executor(self._worker, self._run, work)

    def _run(self, work: Callable[[], T]) -> T:
        """On the worker: queued messages enter the transcript, ``work`` runs, the view is refreshed. Until
        the refresh, readers see the previous view plus the queue (handed-over messages included)."""
        with self._guard:
            handed = list(self._queued)
        taken = 0
        try:
            for message in handed:  # counted one by one: a refused one never leaves the others queued twice
                self.session.append(message)
                taken += 1
            return work()
        finally:
            view, tokens = self.session.transcript, self.session.tokens
            with self._guard:
                del self._queued[:taken]
                self._view, self._view_tokens = view, tokens
