"""Session ids a client names belong to its credential too (issue 20, item 2): ``X-Microcompact-Session`` and
``X-Claude-Code-Session-Id`` are stored as ``ID@FINGERPRINT``, so two API keys sending the same id get two
conversations, with identical histories or different ones, and nothing of one reaches the other's forwarded
requests; the same key continues its own, also when it sends back the id the proxy answered with; another
key sending that full id still gets a conversation of its own. ``--share-sessions-across-keys`` keeps the
id as it comes. Real ``serve`` processes and in-process proxies over loopback HTTP, real SQLite files.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_session_keys import KEY_A, KEY_B, ROUTES, Served, send, start_serve, upstreams

from microcompact.config import home_dir
from microcompact.router import SessionRouter, branch_id
from microcompact.server import Proxy, ProxySettings
from microcompact.server.run import proxy_config
from microcompact.server.session_key import SessionKeys, default_salt_path, fingerprint_of
from microcompact.store import open_store
from support import local_http
from support.proxy_server import ProxyServer
from support.serve_process import run_cli
from support.server_contract import compacted
from support.session_ids import fingerprint, named
from upstream import ScriptedUpstream

HEADERS = ["X-Microcompact-Session", "X-Claude-Code-Session-Id"]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with upstreams(tmp_path_factory.mktemp("named")) as path:
        yield path


@pytest.fixture(scope="module")
def separate(tmp: Path) -> Iterator[Served]:
    served = start_serve(tmp, "named")
    try:
        yield served
    finally:
        served.process.stop()


# ---------------------------------------------------------------------------------------------- real serve


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_two_keys_naming_one_session_id_get_two_conversations(separate: Served, route: str, header: str) -> None:
    base = separate.process.base_url
    salt = separate.home / "session-salt"
    same = {header: f"team-id-{route}-{header[2:4]}"}
    alice, bob = send(base, route, KEY_A, 0, same), send(base, route, KEY_B, 0, same)
    assert alice == named(same[header], salt, KEY_A) and bob == named(same[header], salt, KEY_B)
    assert alice != bob and fingerprint_of(alice) == fingerprint(salt, KEY_A) != fingerprint_of(bob)
    # Each key's next turns continue its own (the same bytes again), never the other's, never a fork.
    assert send(base, route, KEY_B, 1, same) == bob and send(base, route, KEY_A, 1, same) == alice
    # The id the proxy answered with, sent back, is the same conversation (it is not suffixed twice) ...
    assert send(base, route, KEY_A, 2, {header: alice}) == alice
    # ... and another key sending that full id still gets one of its own.
    taken = send(base, route, KEY_B, 2, {header: alice})
    assert taken == f"{alice}@{fingerprint(salt, KEY_B)}" and taken not in (alice, bob)
    assert send(base, route, KEY_B, 3, same) == bob
    assert KEY_A not in alice + bob + taken and KEY_B not in alice + bob + taken


def test_sessions_list_shows_the_clients_id_and_its_fingerprint(separate: Served) -> None:
    base = separate.process.base_url
    claude_code_id = "0f5c2d6e-8a41-4b7e-9c3d-2e6f1a9b7c40"  # Claude Code's ids are UUIDs
    for key in (KEY_A, KEY_B):
        send(base, "anthropic", key, 0, {"X-Claude-Code-Session-Id": claude_code_id})
    listed = run_cli(separate.home, "sessions", "list", "--db", str(separate.db))
    assert listed.returncode == 0, listed.stderr
    for key in (KEY_A, KEY_B):
        mark = fingerprint(separate.home / "session-salt", key)
        assert re.search(rf"│ {re.escape(claude_code_id)}@{mark} +│ {mark} +│", listed.stdout), listed.stdout
    assert KEY_A not in listed.stdout and KEY_B not in listed.stdout


@pytest.mark.slow
def test_sharing_across_keys_keeps_the_named_id_as_it_comes(tmp: Path) -> None:
    served = start_serve(tmp, "named-share", "--share-sessions-across-keys")
    try:
        base = served.process.base_url
        for header in HEADERS:
            same = {header: f"one-for-the-team-{header[2:4]}"}
            assert send(base, "anthropic", KEY_A, 0, same) == same[header]
            assert send(base, "anthropic", KEY_B, 1, same) == same[header], "one conversation for the team's keys"
            assert fingerprint_of(same[header]) is None
    finally:
        served.process.stop()


# ---------------------------------------------------------------------------------------------- what goes up


def tool_history(who: str, turns: int) -> list[dict[str, Any]]:
    """A chat history of ``turns`` tool rounds, every text of it naming ``who``, then the next task."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."}]
    for t in range(turns):
        call = f"call_{who}_{t}"
        messages.append({"role": "user", "content": f"{who} task {t}."})
        arguments = json.dumps({"command": f"{who}-cmd-{t}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call, "type": "function", "function": {"name": "Bash", "arguments": arguments}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": f"{who} output {t} " * 300})
        messages.append({"role": "assistant", "content": f"{who} done {t}."})
    messages.append({"role": "user", "content": f"{who} task {turns}."})  # the next call's history goes on from here
    return messages


def chat(proxy: ProxyServer, key: str, header: str, session: str, messages: list[dict[str, Any]]) -> str:
    """One chat request with ``key`` naming ``session``: the session it went to (after its follow-up ran)."""
    response = local_http.post(
        f"{proxy.base_url}/v1/chat/completions",
        json={"model": "m", "messages": messages},
        headers={"authorization": f"Bearer {key}", header: session},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    proxy.settle()
    return response.headers["x-microcompact-session"]


def forwarded_with(upstream: ScriptedUpstream, key: str) -> list[list[dict[str, Any]]]:
    return [r.body["messages"] for r in upstream.generation_requests() if r.headers["authorization"] == f"Bearer {key}"]


@pytest.mark.parametrize("header", HEADERS)
def test_one_named_id_different_histories_nothing_crosses(
    upstream: ScriptedUpstream, tmp_path: Path, header: str
) -> None:
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=4096) as proxy:
        alice = bob = ""
        for turn in range(1, 6):
            alice = chat(proxy, KEY_A, header, "cc-1", tool_history("ALICE", turn))
            bob = chat(proxy, KEY_B, header, "cc-1", tool_history("BOB", turn))
        stored = sorted(s["id"] for s in proxy.store.list_sessions())
    salt = proxy.proxy.settings.salt_file
    assert salt is not None
    assert (alice, bob) == (named("cc-1", salt, KEY_A), named("cc-1", salt, KEY_B))
    assert stored == sorted([alice, bob]), "two conversations, neither forked"
    to_alice, to_bob = forwarded_with(upstream, KEY_A), forwarded_with(upstream, KEY_B)
    assert len(to_alice) == len(to_bob) == 5
    assert compacted(to_alice[-1]) and compacted(to_bob[-1]), "both were compacted: summaries went up too"
    assert "BOB" not in json.dumps(to_alice) and "ALICE" not in json.dumps(to_bob)


@pytest.mark.parametrize("header", HEADERS)
def test_one_named_id_identical_histories_two_conversations(
    upstream: ScriptedUpstream, tmp_path: Path, header: str
) -> None:
    """Bob replays Alice's exact history under her session id once she has compacted it: he starts his own
    (sent up as any new conversation of his with that history is, none of her summaries), and her next
    request continues hers, unforked."""
    with ProxyServer(upstream.base_url, tmp_path / "s.db", context_limit=4096) as proxy:
        for turn in range(1, 5):
            alice = chat(proxy, KEY_A, header, "cc-1", tool_history("SAME", turn))
        assert compacted(forwarded_with(upstream, KEY_A)[-1]), "Alice's conversation holds a summary"
        opening = tool_history("SAME", 1)
        fresh_id = chat(proxy, KEY_B, header, "fresh", opening)  # what a new conversation of his sends for it
        bob = chat(proxy, KEY_B, header, "cc-1", opening)
        fresh, sent = forwarded_with(upstream, KEY_B)
        assert sent == fresh, "nothing of Alice's conversation went up for Bob"
        assert "SAME-cmd-2" not in json.dumps(sent), "none of her summaries (her later commands)"
        # Her whole history, byte for byte: sent up as in any conversation of his that made the same
        # requests (it compacts on its own, by its own requests).
        chat(proxy, KEY_B, header, "control", opening)
        control = chat(proxy, KEY_B, header, "control", tool_history("SAME", 4))
        assert chat(proxy, KEY_B, header, "cc-1", tool_history("SAME", 4)) == bob, "Bob continues his own"
        own, replay = forwarded_with(upstream, KEY_B)[-2:]
        assert replay == own and compacted(replay)
        assert chat(proxy, KEY_A, header, "cc-1", tool_history("SAME", 5)) == alice, "Alice's own, not a fork"
        assert compacted(forwarded_with(upstream, KEY_A)[-1]), "she continued her compacted conversation"
        assert chat(proxy, KEY_B, header, "cc-1", tool_history("SAME", 5)) == bob
        stored = sorted(s["id"] for s in proxy.store.list_sessions())
    assert bob != alice and stored == sorted([alice, bob, control, fresh_id]), "four conversations, none forked"
    assert fingerprint_of(alice) != fingerprint_of(bob) and None not in (fingerprint_of(alice), fingerprint_of(bob))


# ---------------------------------------------------------------------------------------------- the key itself

CREDENTIAL = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30)
SESSION_ID = (
    st.text(st.sampled_from("ab~@-0f ") | st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=40)
    .map(str.strip)
    .filter(lambda s: bool(s) and s.isprintable())
)


@given(SESSION_ID, CREDENTIAL, CREDENTIAL, st.integers(1, 4), st.integers(1, 4))
def test_property_a_named_key_is_its_credentials_alone(
    session_id: str, one: str, other: str, branch: int, other_branch: int
) -> None:
    keys = SessionKeys(bytes(range(32)))

    def key(credential: str, name: str) -> str:
        return keys.key("anthropic", {"x-api-key": credential, "x-microcompact-session": name}, "", None)

    mine, theirs = key(one, session_id), key(other, session_id)
    mark = keys.fingerprint("anthropic", {"x-api-key": one})
    assert mine == f"{session_id}@{mark}", "the client's id first, readable"
    assert (mine == theirs) == (one == other)
    assert key(one, mine) == mine, "the answered id sent back is the same conversation"
    assert (key(other, mine) == mine) == (one == other), "another key sending it gets its own"
    # The stored sessions (every branch) of one credential hold its fingerprint, and no other's.
    assert fingerprint_of(branch_id(mine, branch)) == mark
    if one != other:
        assert branch_id(mine, branch) != branch_id(theirs, other_branch)
        assert branch_id(key(other, mine), other_branch) != branch_id(mine, branch)
    assert SessionKeys(None).key("anthropic", {"x-microcompact-session": session_id}, "", None) == session_id


def test_a_named_key_is_never_a_derived_one() -> None:
    keys = SessionKeys(b"d" * 32)
    derived = keys.key("openai", {"authorization": "Bearer k"}, "", ["system", "first"])
    assert "@" not in derived
    looks_derived = keys.key("openai", {"authorization": "Bearer j", "x-microcompact-session": derived}, "", None)
    assert looks_derived != derived and fingerprint_of(looks_derived) == keys.fingerprint(
        "openai", {"authorization": "Bearer j"}
    )


# ---------------------------------------------------------------------------------------------- the test home


def test_the_suite_runs_on_a_temporary_home(tmp_path: Path) -> None:
    """tests/conftest.py points $MICROCOMPACT_HOME at a temporary folder for the whole run, so a Proxy built
    without a salt file (create_app, the bench, test helpers) makes its salt there, not in ~/.microcompact."""
    assert home_dir() != Path.home() / ".microcompact"
    assert home_dir().resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, None), store=store)
    try:
        proxy = Proxy(router, ProxySettings())
        assert default_salt_path().parent == home_dir() and default_salt_path().is_file()
        assert proxy.keys.salt == bytes.fromhex(default_salt_path().read_text().strip())
    finally:
        router.close()
        store.close()
