"""The user floor: user messages stay verbatim, each with the batch marker its gap needs to keep time
order, until together they would leave no room to continue; then the oldest are folded into the summary.

Functions of the transcript, the config and the counter: the summarizing phase calls :func:`fold_users`.
"""

from __future__ import annotations

import logging

from ..config import Config
from ..messages import Message, marker_kind, render_marker
from ..tokens import TokenCounter
from .runs import split_runs

log = logging.getLogger("microcompact")

# Once the user floor is exceeded, the oldest user messages are folded until what stays verbatim is this share
# of the floor: kept markers accumulate between batches, and folding just under the floor would fold again
# at every batch.
FOLD_TARGET = 0.6


def fold_users(
    config: Config, counter: TokenCounter, msgs: list[Message], tokens: list[int], h: int, t: int, users: list[int]
) -> list[int]:
    """The user floor: verbatim user messages, with the batch marker each gap between them needs to stay in
    time order, must leave room to continue. Over the floor, the oldest of ``users`` (never the current
    request) are taken out of it, down to ``FOLD_TARGET`` of the floor, so that the next batch does not
    fold again at once; returns them (they are summarized with the run they sit in)."""
    folded: list[int] = []
    threshold = config.threshold_tokens()
    if threshold:
        floor = config.compression.batch_user_floor_ratio * threshold
        last_user = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "user"), None)
        limit = floor
        while (
            users and users[0] != last_user and kept_cost(counter, msgs, tokens, h, t, users) > limit
        ):  # the current request stays verbatim
            folded.append(users.pop(0))
            limit = FOLD_TARGET * floor
        if folded:
            log.warning(
                "Batch compaction: verbatim user messages exceed %.0f%% of the threshold (with one "
                "marker per run of work between them); folding the oldest %d into the summary",
                100 * config.compression.batch_user_floor_ratio,
                len(folded),
            )
    return folded


def kept_cost(counter: TokenCounter, msgs: list[Message], tokens: list[int], h: int, t: int, users: list[int]) -> int:
    """What the middle would still hold after a compaction keeping ``users`` verbatim, at least: the users,
    an earlier batch marker kept as it is, and for every other run of work the frame of its marker (what
    keeping time order costs; a chat of one-line turns would otherwise need more markers than it has text)."""
    frame = counter.count_message(render_marker("", "batch"))
    cost = sum(tokens[i] for i in users)
    for run in split_runs(msgs, h, t, set(users)):
        if len(run) == 1 and marker_kind(msgs[run[0]]) == "batch":
            cost += tokens[run[0]]
        else:
            cost += frame
    return cost
