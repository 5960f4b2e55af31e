"""The in-use rule: which earlier tool results the agent still uses, read from the transcript alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from microcompact.micro.working_set import (
    COMMAND_USES,
    ITEM_SHARE,
    PENDING,
    RECENT_REPLIES,
    FactsCache,
    facts_of,
    iterations_of,
    working_set,
)
from microcompact.summarizers.facts_extract import Call, tool_kind
from microcompact.summarizers.facts_model import ToolKind
from support.agent_steps import bash, edit, filler, read, reply, user
from support.paths import NORMALIZED

Message = dict[str, Any]
SESSIONS = NORMALIZED
SOURCE = "def pane_exists(name):\n    return name in ActiveSessionRegistry.panes\n"


def test_a_read_the_agent_mentions_is_in_use_and_stops_being_once_unmentioned() -> None:
    msgs = [user("fix the pane check"), *read("src/app/panes.py", SOURCE), *filler(3)]
    msgs.append(reply("pane_exists is the check to change"))
    start = 1
    assert start in working_set(msgs).in_use
    msgs += filler(RECENT_REPLIES, "later")
    assert start not in working_set(msgs).in_use


def test_only_the_newest_holder_of_an_identifier_is_in_use() -> None:
    msgs = [user("go"), *bash("make build", "artifact 6e3cdee91"), *bash("make build", "artifact 6e3cdee91 again")]
    msgs += [reply("built 6e3cdee91"), reply("deploying 6e3cdee91")]
    ws = working_set(msgs)
    assert ws.in_use == {3}
    assert 1 in ws.stale  # the same command ran again since


def test_a_command_output_quoted_once_was_taken_and_one_quoted_again_is_in_use() -> None:
    msgs = [user("go"), *bash("make build", "artifact 6e3cdee91"), reply("built 6e3cdee91")]
    assert COMMAND_USES == 2
    assert working_set(msgs).in_use == frozenset()  # the reply holds the value it took
    msgs.append(reply("deploying 6e3cdee91 next"))
    assert working_set(msgs).in_use == {1}


def test_one_use_keeps_a_command_output_in_use_when_asked() -> None:
    msgs = [user("go"), *bash("make build", "artifact 6e3cdee91"), reply("built 6e3cdee91")]
    assert working_set(msgs, command_uses=1).in_use == {1}


def test_a_read_quoted_once_stays_in_use() -> None:
    msgs = [user("go"), *read("src/app/panes.py", SOURCE), reply("pane_exists is the check")]
    assert working_set(msgs).in_use == {1}


def test_a_taken_command_leaves_the_identifier_to_an_older_read() -> None:
    msgs = [user("go"), *read("src/app/panes.py", SOURCE), *bash("grep -rn pane_exists src", "src/app/panes.py:1")]
    msgs.append(reply("pane_exists is defined once"))
    ws = working_set(msgs)
    assert ws.in_use == {1}


def test_its_own_call_does_not_make_an_iteration_in_use() -> None:
    msgs = [user("go"), *read("src/app/panes.py", "nothing distinctive here")]
    assert working_set(msgs).in_use == frozenset()


def test_the_read_of_the_file_being_edited_is_in_use() -> None:
    msgs = [user("go"), *read("src/app/panes.py", "plain text only"), *filler(2)]
    msgs += edit("src/app/panes.py", "plain", "simple")
    ws = working_set(msgs)
    assert 1 in ws.in_use and 1 not in ws.stale


def test_a_read_edited_since_and_no_longer_used_is_stale() -> None:
    msgs = [user("go"), *read("src/app/panes.py", SOURCE), *edit("src/app/panes.py", "name", "label")]
    msgs += filler(RECENT_REPLIES + 1)
    ws = working_set(msgs)
    assert 1 not in ws.in_use and 1 in ws.stale


def test_what_a_user_said_makes_nothing_in_use() -> None:
    msgs = [user("look at ActiveSessionRegistry"), *read("src/app/panes.py", SOURCE)]
    msgs.append(reply("ActiveSessionRegistry it is"))
    assert working_set(msgs).in_use == frozenset()
    assert "ActiveSessionRegistry" not in working_set(msgs).mentioned


def test_keep_within_keeps_the_most_recently_used_first() -> None:
    msgs = [user("go"), *read("src/a_mod.py", "alpha_one"), *read("src/b_mod.py", "beta_two")]
    msgs += [*read("src/c_mod.py", "gamma_three"), reply("alpha_one first"), *filler(2), reply("now beta_two")]
    msgs += [reply("and gamma_three")]
    tokens = [10] * len(msgs)
    ws = working_set(msgs)
    assert ws.in_use == {1, 3, 5}
    assert ws.last_use[5] > ws.last_use[3] > ws.last_use[1]
    assert ws.keep_within(tokens, 40) == {3, 5}
    assert ws.keep_within(tokens, 60) == {1, 3, 5}
    assert ws.keep_within(tokens, 60, before=5) == {1, 3}
    assert ws.tokens(tokens) == 60
    assert ws.dropped({3, 5}, tokens) == (1, 20)
    assert ws.dropped(set(), tokens, before=3) == (1, 20)
    assert ws.dropped({1, 3, 5}, tokens) == (0, 0)


def test_tool_kinds_are_the_ledgers() -> None:
    """The working set reads a call's kind by the same rule as the marker's ledger (one home for it)."""
    assert tool_kind(Call("Read", {"file_path": "a.py"})) is ToolKind.READ
    assert tool_kind(Call("MultiEdit", {"file_path": "a.py"})) is ToolKind.EDIT
    assert tool_kind(Call("write_file", {"path": "a.py"})) is ToolKind.EDIT
    assert tool_kind(Call("str_replace_based_edit_tool", {"command": "view", "path": "a.py"})) is ToolKind.READ
    assert tool_kind(Call("Bash", {"command": "cat a.py"})) is ToolKind.READ
    assert tool_kind(Call("Bash", {"command": "ls"})) is ToolKind.COMMAND


def test_iterations_span_every_result_of_a_call() -> None:
    msgs = [user("go"), *read("src/a_mod.py", "x"), reply("done")]
    msgs[1]["tool_calls"].append({"id": "c2", "type": "function", "function": {"name": "Bash", "arguments": "{}"}})
    msgs.insert(3, {"role": "tool", "tool_call_id": "c2", "content": "y"})
    assert iterations_of(msgs) == {1: 4}


def test_the_cache_reads_each_message_once_and_forgets_dropped_ones() -> None:
    msgs = [user("go"), *read("src/app/panes.py", SOURCE), reply("pane_exists")]
    cache = FactsCache()
    working_set(msgs, facts=cache)
    assert len(cache) == len(msgs)
    first = cache(msgs[2])
    assert cache(msgs[2]) is first
    changed = dict(msgs[2], content="other_name_here")
    assert "other_name_here" in cache(changed).idents
    cache.retain(msgs[:2])
    assert len(cache) == 2
    assert facts_of(msgs[2]).idents == first.idents


@pytest.mark.skipif(not SESSIONS.exists(), reason="shared transcripts not on this machine")
def test_on_a_recorded_session_every_claim_is_a_recent_mention() -> None:
    msgs = [json.loads(line) for line in (SESSIONS / "cc_fa812bfe.jsonl").read_text().splitlines()]
    cache = FactsCache()
    for cut in range(40, len(msgs), 60):
        ws = working_set(msgs[:cut], facts=cache)
        recent = [i for i, m in enumerate(msgs[:cut]) if m.get("role") == "assistant"][-RECENT_REPLIES:]
        for start in ws.in_use:
            held = facts_of(msgs[start]).idents.union(
                *(facts_of(m).idents for m in msgs[start + 1 : ws.iterations[start]])
            )
            mentions = set().union(*(facts_of(msgs[r]).idents for r in recent if r != start))
            assert held & mentions, start
        assert ws.in_use.isdisjoint(ws.stale)


def test_a_later_search_naming_the_path_does_not_take_the_edited_file_from_its_read() -> None:
    msgs = [user("go"), *read("src/app/panes.py", "plain text only")]
    msgs += bash("grep -rl label src", "src/app/panes.py")
    msgs += [reply("src/app/panes.py has it"), *edit("src/app/panes.py", "plain", "simple")]
    ws = working_set(msgs)
    assert {1, 3} <= ws.in_use


def test_the_cache_forgets_what_folds_dropped_by_itself() -> None:
    msgs = [user("go"), *filler(60)]
    cache = FactsCache()
    working_set(msgs, facts=cache)
    for k in range(4):  # as folds do: most messages gone, the rest copies
        msgs = [dict(m) for m in msgs[:10]] + filler(50, f"new{k}")
        working_set(msgs, facts=cache)
    assert len(cache) <= 2 * len(msgs) + 64 + len(msgs)


def test_a_result_over_half_the_budget_is_not_kept_and_the_rest_is() -> None:
    """One result may take at most ``ITEM_SHARE`` of the working set's budget: a huge output the agent
    quoted one value from would otherwise be the whole set, rewritten at every fold."""
    msgs = [user("go"), *bash("make dump", "noise " * 50 + "token_6e3cdee91"), *read("src/a_mod.py", "alpha_one")]
    msgs += [reply("token_6e3cdee91 and alpha_one"), reply("token_6e3cdee91 once more")]
    tokens = [10, 10, 600, 10, 100, 10, 10]
    ws = working_set(msgs)
    assert ws.in_use == {1, 3}
    assert ws.keep_within(tokens, 1_300) == {1, 3}
    budget = int((610 - 1) / ITEM_SHARE)  # the dump is just over the share
    assert ws.keep_within(tokens, budget) == {3}
    assert ws.dropped({3}, tokens) == (1, 610)


KEY_4, KEY_5, ID_OLD = "3f9a0c2e7b1d4a65", "8c41e07d2b9f3a16", "d2e5a9b04c7f1836"


def _refetch_after_working_step() -> list[Message]:
    """The reactive agent's cascade (issue 26): step 5's output holds the key the next reply must quote, but the
    agent first re-runs an old command whose output a fold took; no reply has quoted step 5's key yet."""
    msgs = [user("go"), *filler(4)]
    msgs += bash("run step 4", f"key of step 4: {KEY_4}")
    msgs += bash("run step 5", f"key of step 5: {KEY_5}", text=f"step 4 key {KEY_4}")
    msgs += bash("run step 1", f"id of step 1: {ID_OLD}")  # the re-fetch: it quotes nothing of step 5
    return msgs


def test_the_step_the_agent_works_on_is_pending_behind_a_refetch() -> None:
    msgs = _refetch_after_working_step()
    refetch, working, used = len(msgs) - 2, len(msgs) - 4, len(msgs) - 6
    ws = working_set(msgs)
    assert ws.pending == {refetch, working}
    assert used not in ws.pending  # step 5's reply quoted step 4's key
    assert working not in ws.in_use  # no reply mentions step 5's key: the mention rule alone lost it
    tokens = [10] * len(msgs)
    assert ws.keep_within(tokens, 0, before=refetch) == {working}


def test_an_output_the_next_call_used_is_not_pending() -> None:
    msgs = _refetch_after_working_step()[:-2]
    msgs += bash("run step 6", "key of step 6: 5a7c", text=f"step 5 key {KEY_5}")
    assert working_set(msgs).pending == frozenset()  # step 6 holds no identifier, step 5 was used


def test_pending_needs_an_output_the_agent_used_within_reach() -> None:
    """At most ``PENDING`` before the newest, and only behind an output a reply used: an agent that never
    quotes its outputs (a scripted loop) has nothing pending, and its folds keep only their tail."""
    value = "value_0_" + "ab" * 8
    msgs = [user("go"), *bash("run step 0", value)]
    for k in range(1, PENDING + 2):
        msgs += bash(f"run step {k}", f"value_{k}_{'cd' * 8}", text=f"quoting {value}" if k == 1 else "")
    ws = working_set(msgs)
    assert len(ws.pending) == PENDING + 1 and 1 not in ws.pending
    assert max(ws.pending) == len(msgs) - 2
    msgs += bash("run one more", "value_9_" + "ef" * 8)
    assert working_set(msgs).pending == frozenset()  # the used one is out of reach
    loop = [user("go")]
    for k in range(4):
        loop += bash(f"run step {k}", f"value_{k}_{'ab' * 8}")
    assert working_set(loop).pending == frozenset()
