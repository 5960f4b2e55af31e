"""HistoryCompactor, the part every adapter shares: views keyed by message identity, forks on divergence,
resumption from the store."""

from __future__ import annotations

from pathlib import Path

from microcompact import open_store
from microcompact.contract import user_message_errors
from microcompact.integrations import HistoryCompactor, opening_key
from microcompact.integrations.compactor import compactor_for
from microcompact.messages import Message
from microcompact.summarizers import ClientSummarizer, ExtractiveSummarizer
from support.agent_script import config, tool_output


def coding_history(turns: int, steps: int = 8, opening: str = "Fix the reader.") -> list[Message]:
    """``turns`` user turns of ``steps`` file reads each (about 1,200 tokens per output)."""
    history: list[Message] = []
    for turn in range(turns):
        history.append({"role": "user", "content": opening if turn == 0 else f"Next: part {turn}."})
        for step in range(steps):
            call = {"id": f"c{turn}_{step}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            history.append({"role": "assistant", "content": "", "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": f"c{turn}_{step}", "content": tool_output(turn, step)})
        history.append({"role": "assistant", "content": f"Done with part {turn}."})
    return history


class CountingSummarizer(ExtractiveSummarizer):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def merge(self, summary: str, exchange: list[dict]) -> str:
        self.calls += 1
        return super().merge(summary, exchange)

    def batch(self, summary: str, messages: list[dict], focus: str | None = None) -> str:
        self.calls += 1
        return super().batch(summary, messages, focus)


def test_each_view_message_says_which_client_message_it_stands_for() -> None:
    history = coding_history(3)
    view = HistoryCompactor(config=config()).view("k", history)
    assert sum(1 for e in view if not e.unchanged) > 10  # the old tool outputs were stubbed by a prune
    for entry in view:
        assert entry.origin is not None
        original = history[entry.origin]
        if entry.unchanged:
            assert entry.message == original
        else:
            assert entry.message["tool_call_id"] == original["tool_call_id"]
            assert len(entry.message["content"]) < len(original["content"])
    assert user_message_errors(history, [e.message for e in view]) == []


def test_a_history_that_parts_ways_continues_in_a_branch_of_its_own() -> None:
    compactor = HistoryCompactor(config=config())
    first = coding_history(3)
    compactor.view("k", first)
    edited = [*first[:-1], {"role": "assistant", "content": "Done, differently."}]
    view = [e.message for e in compactor.view("k", edited)]
    assert view[-1] == {"role": "assistant", "content": "Done, differently."}
    assert {"role": "assistant", "content": "Done with part 2."} not in view
    assert sorted(s.session_id for s in compactor.router.sessions()) == ["k", "k~2"]
    assert [e.message for e in compactor.view("k", first)][-1] == first[-1]  # the first one goes on as it was


def test_opening_key_names_the_conversation_by_its_opening() -> None:
    a, b = coding_history(1), coding_history(1, opening="Fix the writer.")
    assert opening_key(a) == opening_key(coding_history(2)) != opening_key(b)
    system = [{"role": "system", "content": "You fix bugs."}]
    assert opening_key([*system, *a]) != opening_key([*system, *b])  # a shared system prompt is not enough


def test_a_new_process_resumes_from_the_store_without_summarizing_again(tmp_path: Path) -> None:
    history = coding_history(3)
    with open_store(tmp_path / "s.db") as store:
        first = CountingSummarizer()
        compactor = HistoryCompactor(config=config(), store=store, summarizer=first)
        for end in range(2, len(history) + 1):
            if history[end - 1]["role"] != "tool":
                compactor.view("k", history[:end])
        before = [e.message for e in compactor.view("k", history)]
        compactor.close()
        assert first.calls > 5
        again = CountingSummarizer()
        resumed = HistoryCompactor(config=config(), store=store, summarizer=again)
        assert [e.message for e in resumed.view("k", history)] == before
        assert again.calls == 0
        resumed.close()


def test_adapter_options_choose_the_summarizer() -> None:
    """The adapters' ``summarizer``/``model`` options: a callable becomes a client summarizer named by the
    model; none leaves the offline one (the router's default)."""
    given = compactor_for(32_000, lambda prompt: "### Notes\n- done", "my-model", None, None)
    assert isinstance(given.router.summarizer, ClientSummarizer) and given.router.summarizer.name == "my-model"
    assert given.config.model.context_length == 32_000
    default = compactor_for(None, None, "ignored", config(), None)
    assert default.router.summarizer is None
    given.close()
    default.close()
