"""Head, tail, iterations and exchanges."""

from microcompact.messages import render_micro_marker
from microcompact.window import bounded_exchange, exchange_start, head_end, iteration_end, tail_start


def call(cid):
    return {"id": cid, "type": "function", "function": {"name": "Read", "arguments": "{}"}}


def A(*ids, content="a"):
    m = {"role": "assistant", "content": content}
    if ids:
        m["tool_calls"] = [call(i) for i in ids]
    return m


def T(i):
    return {"role": "tool", "tool_call_id": i, "content": "r"}


U = {"role": "user", "content": "u"}
S = {"role": "system", "content": "s"}


def test_head_includes_system_and_extends_over_tool_results():
    msgs = [S, U, A("x", "y"), T("x"), T("y"), A(), U]
    assert head_end(msgs, 2) == 5  # system + user + assistant, extended over its two results
    assert head_end(msgs, 3) == 5
    assert head_end(msgs, 0) == 1
    assert head_end([U, A()], 3) == 2


def test_tail_budget_min_messages_and_never_starts_on_tool():
    msgs = [S, U, A("x"), T("x"), A("y"), T("y"), A(), U, A()]
    toks = [10] * len(msgs)
    assert tail_start(msgs, toks, budget=30, min_messages=1, floor=1) == 6
    assert tail_start(msgs, toks, budget=0, min_messages=3, floor=1) == 6
    # budget ends on a tool result: its call comes along
    assert tail_start(msgs, toks, budget=40, min_messages=1, floor=1) == 4
    assert tail_start(msgs, toks, budget=10**6, min_messages=1, floor=2) == 2


def test_a_tail_of_user_messages_keeps_the_iteration_they_answer():
    # An Anthropic user message with a tool_result beside a reminder: a tool and a user message here. A tail
    # of the reminder alone would let a fold absorb the result the client's newest message holds.
    msgs = [S, U, A("x"), T("x"), A("y"), T("y"), U]
    toks = [10] * len(msgs)
    assert tail_start(msgs, toks, budget=0, min_messages=1, floor=1) == 4
    assert tail_start([*msgs, U], [*toks, 10], budget=0, min_messages=1, floor=1) == 4
    assert tail_start(msgs, toks, budget=0, min_messages=1, floor=5) == 5, "never below the floor's cut"
    # Claude Code's notification beside a result arrives as a system message: the same.
    notice = {"role": "system", "content": "[SYSTEM NOTIFICATION] a background task finished"}
    assert tail_start([*msgs[:-1], notice], toks, budget=0, min_messages=1, floor=1) == 4
    assert tail_start([*msgs, notice], [*toks, 10], budget=0, min_messages=1, floor=1) == 4
    # After a plain answer, or with an assistant message in the tail, nothing changes.
    assert tail_start([S, U, A("x"), T("x"), A(), U], [10] * 6, budget=0, min_messages=1, floor=1) == 5
    assert tail_start([*msgs, A()], [*toks, 10], budget=10, min_messages=1, floor=1) == 7
    # An empty tail (a fold computed ahead) stays empty.
    assert tail_start(msgs, toks, budget=0, min_messages=0, floor=1) == 7


def test_iterations_and_exchanges():
    msgs = [U, A("x"), T("x"), A("y", "z"), T("z"), T("y"), A(), U, A("w")]
    assert iteration_end(msgs, 1) == 3
    assert iteration_end(msgs, 3) == 6
    assert iteration_end(msgs, 8) is None  # result not there yet
    toks = [10] * len(msgs)
    assert bounded_exchange(msgs, toks, 1, 9, 10**6) == (7, 60)
    assert bounded_exchange(msgs, toks, 1, 5, 10**6) == (5, 40)  # stops at the tail
    assert bounded_exchange(msgs, toks, 1, 9, 15) == (3, 20)  # stops once over budget
    assert exchange_start(msgs, 0, 9) == 1


def test_exchange_skips_markers_and_stops_before_one():
    marker = render_micro_marker("s")
    msgs = [U, marker, A(), marker, U]
    assert exchange_start(msgs, 0, 5) == 2
    assert bounded_exchange(msgs, [1] * 5, 2, 5, 100) == (3, 1)


def test_head_budget_releases_a_huge_early_tool_output():
    """Issue 8.7: ``protect_first_n: 3`` pinned a large early tool output forever."""
    msgs = [S, U, A("x"), T("x"), A(), U]
    tokens = [10, 10, 20, 9_000, 20, 10]
    assert head_end(msgs, 3) == 4  # by count alone the 9,000-token output is protected
    assert head_end(msgs, 3, tokens, 1_600) == 2  # over the budget: it leaves the head (the user stays)
    assert head_end(msgs, 3, tokens, 10_000) == 4  # within a larger budget it stays
    assert head_end(msgs, 3, [10, 50_000, 20, 30, 20, 10], 100) == 4  # user messages cost the head nothing


def test_head_never_holds_a_marker():
    marker = render_micro_marker("- did things")
    msgs = [S, U, marker, A(), U]
    assert head_end(msgs, 3, [1] * 5, 1_000) == 2


def test_config_scales_piece_and_head_budgets_with_the_window():
    from microcompact.config import parse_config

    small = parse_config({"model": {"context_length": 32_000}})
    assert small.piece_budget_tokens() == 2_000 and small.head_budget_tokens() == 1_600
    large = parse_config({"model": {"context_length": 200_000}})
    assert large.piece_budget_tokens() == 8_000  # the default, unchanged for large windows
    explicit = parse_config(
        {
            "compression": {"micro_compact_max_exchange_tokens": 8_000, "protect_first_max_tokens": 50},
            "model": {"context_length": 32_000},
        }
    )
    assert explicit.piece_budget_tokens() == 8_000 and explicit.head_budget_tokens() == 50  # explicit wins
    # overrides (the CLI's --context-limit) keep the budget derived
    assert parse_config({}).with_overrides(model={"context_length": 32_000}).piece_budget_tokens() == 2_000


def test_window_of_is_the_head_tail_and_budgets_a_pass_works_in():
    """One value per pass: the head's end (within the head budget), the tail's start (within the tail budget,
    never on a tool result) and the budgets they came from."""
    from microcompact.config import parse_config
    from microcompact.window import Window, WindowBudget, protected_head, protected_tail

    config = parse_config(
        {
            "compression": {"protect_first_n": 2, "min_tail_messages": 1, "target_ratio": 0.001, "threshold": 1.0},
            "model": {"context_length": 40_000},
        }
    )  # a 40-token tail
    msgs = [S, U, A("x"), T("x"), A(), U, A("y"), T("y"), A(), U, A()]
    tokens = [10] * len(msgs)
    w = Window.of(msgs, tokens, WindowBudget.of(config))
    assert (w.head, w.tail) == (4, 6)  # head over x's result; tail back from 7 (a result) to its call
    assert w.head == protected_head(msgs, tokens, config) and w.tail == protected_tail(msgs, tokens, config, w.head)
    assert (w.head_budget, w.tail_budget, w.piece_budget) == (
        config.head_budget_tokens(),
        config.tail_budget_tokens(),
        config.piece_budget_tokens(),
    )
    assert w.in_tail(6) and not w.in_tail(5)
