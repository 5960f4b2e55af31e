"""The proxy's side of a fold computed ahead that kept none of the transcript it ran on: the follow-up of the
request that ended the turn runs ``fold_ahead`` on that request's transcript (the upstream's answer is not
in it), and a client that retries the same request then must get a view that ends in its own last message,
not in the marker; the next request, with the answer and the user's new message, switches to the fold.

No HTTP and no timing: ``Compaction`` as the app drives it, the worker waited for after every request."""

from __future__ import annotations

from pathlib import Path

from microcompact.bill.cache_usage import UsageReport
from microcompact.contract import tool_pairing_errors
from microcompact.messages import is_marker
from microcompact.micro.price import PricePolicy
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import proxy_config
from microcompact.store import open_store

OA = OpenAIFormat()


def tool_step(history: list[dict[str, object]], k: int) -> None:
    """A Bash call and its 3,000-line output (~6K tokens, as Claude Code's 24 KB outputs)."""
    call = {"id": f"c{k}", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
    output = "\n".join(str(k * 10**6 + i) for i in range(3000))
    history.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})


def test_a_retry_after_the_turn_end_follow_up_never_forwards_a_view_ending_in_the_marker(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    config_file = tmp_path / "background.yaml"  # folds are computed ahead only in the background
    config_file.write_text("compression:\n  micro_compact_background: true\n")
    router = SessionRouter(proxy_config(config_file, 200_000), store=store)
    compaction = Compaction(router, Metrics())
    history: list[dict[str, object]] = [
        {"role": "system", "content": "system " * 16_000},
        {"role": "user", "content": "Run the numbered steps."},
    ]
    cached = 0
    for k in range(40):
        prepared = compaction.prepare(OA, {}, "k", history)
        session = prepared.session
        assert session is not None and session.background is not None
        policy = session.micro.policy
        assert isinstance(policy, PricePolicy)
        prompt = session.tokens
        if session.background.busy and policy.ahead:
            break  # a fold was started ahead at this request
        compaction.answered(prepared, prompt, UsageReport(prompt, cache_read_tokens=min(cached, prompt)))
        cached = prompt
        session.background.wait(30)
        compaction.follow_up("k")
        tool_step(history, k)
    else:
        raise AssertionError("no fold started ahead in 40 requests")
    # This answer ends the turn, and the upstream read nothing from its cache: the fold is due at no cost.
    compaction.answered(prepared, prompt, UsageReport(prompt, cache_read_tokens=0, turn_over=True))
    session.background.wait(30)
    compaction.follow_up("k")  # holds the fold computed ahead; fold_ahead extends it over nothing new
    session.background.wait(30)
    adopted = session.background.adopted_ahead
    retry = compaction.prepare(OA, {}, "k", history)  # the client never got the answer: the same request
    assert retry.degraded is None and "absorbed" not in retry.outcomes, retry.outcomes
    assert retry.messages[-1] == history[-1] and not is_marker(session.transcript[-1])
    assert not tool_pairing_errors(retry.messages) and session.background.adopted_ahead == adopted
    compaction.answered(retry, prompt, UsageReport(prompt, cache_read_tokens=0, turn_over=True))
    session.background.wait(30)
    compaction.follow_up("k")
    session.background.wait(30)
    history += [{"role": "assistant", "content": "All steps ran."}, {"role": "user", "content": "Thanks, now commit."}]
    after = compaction.prepare(OA, {}, "k", history)
    assert "absorbed" in after.outcomes and session.background.adopted_ahead == adopted + 1, after.outcomes
    assert after.messages[-1] == history[-1] and after.messages[0] == history[0]
    markers = [i for i, m in enumerate(session.transcript) if is_marker(m)]
    assert len(markers) == 1 and len(after.messages) < len(history)
    assert not tool_pairing_errors(after.messages)
    router.close()
    store.close()
