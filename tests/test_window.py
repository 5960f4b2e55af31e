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
