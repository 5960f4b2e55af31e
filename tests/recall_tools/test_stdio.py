"""``microcompact mcp`` as a client runs it: a real stdio subprocess, spoken to with the ``mcp`` client SDK,
over a real store (a SQLite file; a PostgreSQL database) holding two conversations of two credentials
folded by the proxy's own engine. Each capability reads its own conversation; another's handle, a forged
capability and a huge query come back as the tool's one-line error, and the server keeps serving."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from microcompact.recall_tools import recall_tool_names
from microcompact.store import PostgresStore, open_store
from support.lazy_sdk import lazy
from support.recall_folds import AWS_SECRET, Folded, fold_two_conversations

mcp = lazy("mcp")


def folded_store(store_location: str, tmp_path: Path) -> tuple[Folded, Folded]:
    store = (
        PostgresStore(store_location)
        if store_location.startswith(("host=", "postgres"))
        else open_store(store_location)
    )
    try:
        return fold_two_conversations(store, tmp_path)
    finally:
        store.close()


async def session_calls(store_location: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The server's tools, and each call's (is_error, text), in one stdio session."""
    server = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "microcompact.cli", "mcp", "--db", store_location], env=dict(os.environ)
    )
    async with mcp.Client(server) as client:
        listed = (await client.list_tools()).tools
        results = []
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            results.append((bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)))
    return listed, results


def test_the_stdio_server_keeps_two_credentials_conversations_apart(store_location: str, tmp_path: Path) -> None:
    a, b = folded_store(store_location, tmp_path)
    calls = [
        ("recall", {"conversation": a.conversation, "query": "alpha_unique_2 shared_marker_word"}),
        ("recall", {"conversation": b.conversation, "query": "bravo_unique_2 shared_marker_word"}),
        ("expand", {"conversation": a.conversation, "handle": a.marker_handle}),
        ("expand", {"conversation": a.conversation, "handle": b.marker_handle}),
        ("expand", {"conversation": b.conversation, "handle": a.marker_handle}),
        ("recall", {"conversation": "f" * 24, "query": "shared_marker_word"}),
        ("recall", {"conversation": a.session_id, "query": "shared_marker_word"}),
        ("recall", {"conversation": a.conversation, "query": "shared_marker_word " * 20_000}),
        ("recall", {"conversation": a.conversation, "query": "deploy used"}),
    ]
    listed, results = anyio.run(session_calls, store_location, calls)
    names = {tool.name: tool.description or "" for tool in listed}
    assert set(names) == {"recall", "expand"}
    request_tools = [{"name": f"mcp__microcompact__{n}", "description": d} for n, d in names.items()]
    assert recall_tool_names({"tools": request_tools}) is not None, "the proxy recognises the listed tools"

    (err_a, found_a), (err_b, found_b), (err_i, index_a), *refusals, (err_s, secret) = results
    assert not err_a and "alpha_unique_2 " in found_a.splitlines()[1] and "bravo" not in found_a
    assert not err_b and "bravo_unique_2 " in found_b.splitlines()[1] and "alpha" not in found_b
    assert not err_i and index_a.startswith(f"{a.marker_handle} is a summary of ") and "bravo" not in index_a
    other_a, other_b, forged, session_id, huge = refusals
    assert other_a[0] and other_a[1].endswith(f"expand: handle {b.marker_handle} is not in this conversation")
    assert other_b[0] and other_b[1].endswith(f"expand: handle {a.marker_handle} is not in this conversation")
    for refused in (forged, session_id):
        assert refused[0] and "copy it from the summary's note" in refused[1] and "\n" not in refused[1]
    assert huge[0] and "recall takes at most" in huge[1] and "\n" not in huge[1]
    assert not err_s and "deploy used [REDACTED] again" in secret and AWS_SECRET not in secret


def test_a_missing_store_is_one_line_on_stderr(tmp_path: Path) -> None:
    import subprocess

    missing = tmp_path / "none.db"
    done = subprocess.run(
        [sys.executable, "-m", "microcompact.cli", "mcp", "--db", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == "", "stdout is the protocol's: nothing else goes there"
    assert "no session store at" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not missing.exists(), "a mistyped store is not created"
