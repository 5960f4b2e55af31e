"""Conversations belong to a credential (issue 20, item 2): the key ``serve`` derives for a conversation holds a
salted fingerprint of the client's API key, never the key, so two keys sending byte-identical histories get
two stored conversations and neither continues the other, on every compacted route (Chat Completions,
Anthropic Messages, Responses, Gemini); the same key continues its own, in whichever header it comes;
``--share-sessions-across-keys`` (or ``proxy.share_sessions_across_keys``) merges them again. The salt is one
0600 file in ``$MICROCOMPACT_HOME``, shared by every process on one store; the key itself is nowhere in the
store's bytes, the logs or ``sessions list``. Real ``serve`` processes over loopback HTTP, real SQLite files.
"""

from __future__ import annotations

import re
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import proxy_config
from microcompact.server.session_key import (
    NO_CREDENTIAL,
    SessionKeys,
    credential_parts,
    fingerprint_of,
    load_salt,
)
from microcompact.store import open_store
from support import local_http
from support.gemini_server import Exchange, GeminiUpstream
from support.serve_process import ServeProcess, run_cli
from support.stores import FreshPgDatabase
from upstream.responses_server import ResponsesUpstream

KEY_A = "sk-alice-0123456789abcdefSECRET"
KEY_B = "sk-bob-fedcba9876543210SECRET"
SALT = re.compile(r"salt ([0-9a-f]{8}) in ")


@dataclass
class TwoKeyGemini(GeminiUpstream):
    """The scripted Gemini upstream, taking a second key as its own (Google checks keys; these tests need two)."""

    other_key: str = KEY_B

    def _refusal(self, exchange: Exchange) -> str | None:
        if exchange.headers.get("x-goog-api-key") == self.other_key:
            exchange = Exchange(
                exchange.path, exchange.query, {**exchange.headers, "x-goog-api-key": self.api_key}, exchange.body
            )
        if self.other_key in (exchange.query.get("key") or []):
            exchange = Exchange(
                exchange.path, {**exchange.query, "key": [self.api_key]}, exchange.headers, exchange.body
            )
        return super()._refusal(exchange)


# ---------------------------------------------------------------------------------------------- the routes

# Each route: (path, headers for a credential, the body of a conversation's turn n).
Route = tuple[str, Callable[[str], dict[str, str]], Callable[[int], dict[str, Any]]]


def _chat_turn(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Chat route."}]
    for i in range(n + 1):
        messages.append({"role": "user", "content": f"chat question {i}"})
        if i < n:
            messages.append({"role": "assistant", "content": f"chat answer {i}"})
    return {"model": "gpt-test", "messages": messages}


def _anthropic_turn(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(n + 1):
        messages.append({"role": "user", "content": f"anthropic question {i}"})
        if i < n:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": f"anthropic answer {i}"}]})
    return {"model": "claude-test", "max_tokens": 256, "system": "Anthropic route.", "messages": messages}


def _responses_turn(n: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for i in range(n + 1):
        items.append({"role": "user", "content": f"responses question {i}"})
        if i < n:
            items.append({"role": "assistant", "content": f"responses answer {i}"})
    return {"model": "gpt-test", "instructions": "Responses route.", "input": items}


def _gemini_turn(n: int) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for i in range(n + 1):
        contents.append({"role": "user", "parts": [{"text": f"gemini question {i}"}]})
        if i < n:
            contents.append({"role": "model", "parts": [{"text": f"gemini answer {i}"}]})
    return {"systemInstruction": {"parts": [{"text": "Gemini route."}]}, "contents": contents}


ROUTES: dict[str, Route] = {
    "chat": ("/v1/chat/completions", lambda key: {"authorization": f"Bearer {key}"}, _chat_turn),
    "anthropic": (
        "/v1/messages",
        lambda key: {"x-api-key": key, "anthropic-version": "2023-06-01"},
        _anthropic_turn,
    ),
    "responses": ("/v1/responses", lambda key: {"authorization": f"Bearer {key}"}, _responses_turn),
    "gemini": ("/v1beta/models/gemini-test:generateContent", lambda key: {"x-goog-api-key": key}, _gemini_turn),
}


def send(base_url: str, route: str, key: str | None, turn: int, headers: dict[str, str] | None = None) -> str:
    """One request of ``route``'s conversation at ``turn`` with ``key``: the session it went to."""
    path, credential, body = ROUTES[route]
    sent = {**(credential(key) if key is not None else {}), **(headers or {})}
    response = local_http.post(f"{base_url}{path}", json=body(turn), headers=sent, timeout=30)
    assert response.status_code == 200, f"{route}: {response.text}"
    assert response.headers["x-microcompact-mode"] == "compacted"
    return response.headers["x-microcompact-session"]


@dataclass
class Served:
    process: ServeProcess
    home: Path
    db: Path
    log: Path


def start_serve(tmp: Path, name: str, *extra: str, home: Path | None = None, db: Path | None = None) -> Served:
    """A real ``serve`` in front of the Responses upstream (chat, messages, responses) and the Gemini one."""
    home = home or tmp / f"home-{name}"
    db = db or tmp / f"{name}.db"
    log = tmp / f"{name}.log"
    options = ("--db", str(db), "--log", str(log), *UPSTREAMS[tmp], *extra)
    return Served(ServeProcess(home, *options).start(), home, db, log)


UPSTREAMS: dict[Path, tuple[str, ...]] = {}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A module directory with the upstreams serve forwards to."""
    with upstreams(tmp_path_factory.mktemp("keys")) as path:
        yield path


@contextmanager
def upstreams(path: Path) -> Iterator[Path]:
    """``path``, with the upstreams ``start_serve`` forwards to running (for ``start_serve(path, ...)``)."""
    with ResponsesUpstream() as openai_and_anthropic, TwoKeyGemini(api_key=KEY_A) as gemini:
        UPSTREAMS[path] = (
            "--openai-upstream",
            openai_and_anthropic.openai_base_url,
            "--anthropic-upstream",
            openai_and_anthropic.base_url,
            "--gemini-upstream",
            gemini.base_url,
        )
        yield path
        UPSTREAMS.pop(path)


@pytest.fixture(scope="module")
def separate(tmp: Path) -> Iterator[Served]:
    served = start_serve(tmp, "separate")
    try:
        yield served
    finally:
        served.process.stop()


# ---------------------------------------------------------------------------------------------- kept apart


@pytest.mark.parametrize("route", list(ROUTES))
def test_two_keys_with_identical_histories_get_two_conversations(separate: Served, route: str) -> None:
    base = separate.process.base_url
    alice, bob = send(base, route, KEY_A, 0), send(base, route, KEY_B, 0)
    assert alice != bob, "byte-identical histories, two credentials: two conversations"
    assert fingerprint_of(alice) not in (None, fingerprint_of(bob))
    # Each key's next turn continues its own conversation, never the other's (the same bytes again).
    assert send(base, route, KEY_B, 1) == bob
    assert send(base, route, KEY_A, 1) == alice
    assert send(base, route, KEY_A, 2) == alice and send(base, route, KEY_B, 2) == bob
    assert KEY_A not in alice + bob and KEY_B not in alice + bob


def test_one_key_in_another_header_is_the_same_conversation(separate: Served) -> None:
    base = separate.process.base_url
    version = {"anthropic-version": "2023-06-01"}
    path, _, body = ROUTES["anthropic"]
    first = local_http.post(f"{base}{path}", json=body(0), headers={**version, "x-api-key": KEY_A}, timeout=30)
    # the anthropic SDK sends its api_key as a bearer token; curl and Claude Code as x-api-key
    again = local_http.post(
        f"{base}{path}", json=body(1), headers={**version, "authorization": f"Bearer {KEY_A}"}, timeout=30
    )
    assert first.status_code == again.status_code == 200
    assert again.headers["x-microcompact-session"] == first.headers["x-microcompact-session"]
    gemini_path, _, gemini_body = ROUTES["gemini"]
    header = local_http.post(f"{base}{gemini_path}", json=gemini_body(0), headers={"x-goog-api-key": KEY_B}, timeout=30)
    query = local_http.post(f"{base}{gemini_path}?key={KEY_B}", json=gemini_body(1), timeout=30)
    assert header.status_code == query.status_code == 200
    assert query.headers["x-microcompact-session"] == header.headers["x-microcompact-session"]


def test_requests_without_a_credential_keep_working(separate: Served) -> None:
    base = separate.process.base_url
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "no key at all"}]}
    first = local_http.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    body["messages"] += [{"role": "assistant", "content": "fine"}, {"role": "user", "content": "still none"}]
    again = local_http.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert first.status_code == again.status_code == 200
    session = first.headers["x-microcompact-session"]
    assert fingerprint_of(session) == NO_CREDENTIAL and again.headers["x-microcompact-session"] == session


def test_the_key_is_nowhere_in_the_store_the_logs_or_sessions_list(separate: Served) -> None:
    base = separate.process.base_url
    for route in ROUTES:
        send(base, route, KEY_A, 0)
        send(base, route, KEY_B, 0)
    salt = separate.home / "session-salt"
    assert stat.S_IMODE(salt.stat().st_mode) == 0o600
    assert re.fullmatch(rb"[0-9a-f]{64}\n", salt.read_bytes())
    listed = run_cli(separate.home, "sessions", "list", "--db", str(separate.db))
    assert listed.returncode == 0, listed.stderr
    ids = re.findall(r"(?:openai|anthropic|gemini)-[0-9a-f]{16}-[0-9a-f]{20}", listed.stdout)
    fingerprints = {fingerprint_of(i) for i in ids}
    assert len(fingerprints) >= 2 and None not in fingerprints, "sessions of two credentials"
    for fingerprint in fingerprints:
        assert re.search(rf"│ {fingerprint} +│", listed.stdout), "its own column shows the fingerprint"
    stored = b"".join(p.read_bytes() for p in separate.db.parent.glob(f"{separate.db.name}*"))
    assert b"gemini question 0" in stored, "the store holds the conversations"
    secrets = [KEY_A, KEY_B, KEY_A[-20:], KEY_B[-20:]]
    texts = {
        "the store": stored.decode("latin-1"),
        "the log": separate.log.read_text(errors="replace"),
        "serve's output": "".join(separate.process.stderr),
        "sessions list": listed.stdout + listed.stderr,
    }
    for where, text in texts.items():
        assert not [s for s in secrets if s in text], f"a credential in {where}"


# ---------------------------------------------------------------------------------------------- shared on purpose


@pytest.mark.parametrize("how", ["flag", pytest.param("config", marks=pytest.mark.slow)])  # make test: the flag
def test_sharing_across_keys_merges_identical_histories(tmp: Path, how: str) -> None:
    if how == "flag":
        extra: tuple[str, ...] = ("--share-sessions-across-keys",)
    else:
        config = tmp / "share.yaml"
        config.write_text("proxy:\n  share_sessions_across_keys: true\n")
        extra = ("--config", str(config))
    served = start_serve(tmp, f"share-{how}", *extra)
    try:
        base = served.process.base_url
        assert any("shared across credentials" in line for line in served.process.stderr)
        for route in ROUTES:
            alice = send(base, route, KEY_A, 0)
            assert send(base, route, KEY_B, 0) == alice, f"{route}: one conversation for the team's keys"
            assert send(base, route, KEY_B, 1) == alice and send(base, route, KEY_A, 2) == alice
            assert fingerprint_of(alice) is None
    finally:
        served.process.stop()
    assert not (served.home / "session-salt").exists(), "no salt needed"


def test_the_config_setting_takes_a_boolean_only(tmp: Path) -> None:
    config = tmp / "bad-share.yaml"
    config.write_text("proxy:\n  share_sessions_across_keys: 'on'\n")
    result = run_cli(tmp / "home-bad", "serve", "--port", "0", "--config", str(config))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "proxy.share_sessions_across_keys" in result.stderr


# ---------------------------------------------------------------------------------------------- one salt per store


@pytest.fixture(params=["sqlite", "postgres"])
def one_store(request: pytest.FixtureRequest, tmp: Path) -> Iterator[str]:
    """A fresh store several processes open: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp / f"one-{len(list(tmp.glob('one-*.db')))}.db")
        return
    admin = request.getfixturevalue("pg_dsn")
    if not admin.startswith(("postgresql://", "postgres://")):
        pytest.skip("needs a URL-style PostgreSQL DSN")
    fresh = FreshPgDatabase(admin)
    try:
        yield urlunsplit(urlsplit(admin)._replace(path="/" + fresh.name))
    finally:
        fresh.drop()


def salt_of(process: ServeProcess) -> str:
    found = SALT.search("".join(process.stderr))
    assert found is not None, "the startup line names the salt"
    return found.group(1)


@pytest.mark.slow  # processes racing to start; test_every_process_on_one_home_reads_one_salt is the fast part
def test_processes_on_one_store_share_the_salt(tmp: Path, one_store: str) -> None:
    """Two processes started together on a fresh home and one store (shared): one salt (the first to link
    its file wins), so a conversation continues on the other process, and still only for its own key."""
    home = tmp / f"home-pair-{abs(hash(one_store))}"
    first = ServeProcess(home, "--db", one_store, "--shared", *UPSTREAMS[tmp])
    second = ServeProcess(home, "--db", one_store, "--shared", *UPSTREAMS[tmp])
    starts = [threading.Thread(target=p.start) for p in (first, second)]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    try:
        assert salt_of(first) == salt_of(second), "both processes read one salt"
        assert not list(home.glob(".session-salt.*")), "no temporary salt left behind"
        alices = {}
        for route in ROUTES:
            alice = alices[route] = send(first.base_url, route, KEY_A, 0)
            assert send(second.base_url, route, KEY_A, 1) == alice, f"{route}: continued on the other process"
            bob = send(second.base_url, route, KEY_B, 0)
            assert bob != alice and send(first.base_url, route, KEY_B, 1) == bob
    finally:
        first.stop()
        second.stop()
    restarted = ServeProcess(home, "--db", one_store, *UPSTREAMS[tmp]).start()
    try:
        assert salt_of(restarted) == salt_of(first)
        assert send(restarted.base_url, "chat", KEY_A, 2) == alices["chat"], "a restart keeps the salt and the key"
    finally:
        restarted.stop()


@pytest.mark.slow  # three processes; test_another_home_keys_apart_until_the_salt_is_copied is the fast part
def test_another_machines_home_needs_the_salt_copied(tmp: Path, one_store: str) -> None:
    """A process with a home of its own (another machine on one PostgreSQL store) makes its own salt: it
    continues none of the first process's conversations (nothing crosses, even for one key) until the salt
    file is copied into its home, as the README says."""
    here, there = tmp / f"home-here-{abs(hash(one_store))}", tmp / f"home-there-{abs(hash(one_store))}"
    first = ServeProcess(here, "--db", one_store, "--shared", *UPSTREAMS[tmp]).start()
    try:
        alice = send(first.base_url, "anthropic", KEY_A, 0)
        other = ServeProcess(there, "--db", one_store, "--shared", *UPSTREAMS[tmp]).start()
        try:
            assert salt_of(other) != salt_of(first)
            assert send(other.base_url, "anthropic", KEY_A, 1) != alice, "another salt continues nothing"
        finally:
            other.stop()
        (there / "session-salt").write_bytes((here / "session-salt").read_bytes())
        copied = ServeProcess(there, "--db", one_store, "--shared", *UPSTREAMS[tmp]).start()
        try:
            assert salt_of(copied) == salt_of(first)
            assert send(copied.base_url, "anthropic", KEY_A, 1) == alice, "the copied salt continues it"
        finally:
            copied.stop()
    finally:
        first.stop()


def test_every_process_on_one_home_reads_one_salt(tmp_path: Path) -> None:
    """Starters racing on a fresh home (threads here, processes in the slow test above): one salt, the
    first linked into place, no temporary file left, and so one key per conversation and credential."""
    path = tmp_path / "home" / "session-salt"
    salts: list[bytes] = []
    ready = threading.Barrier(4)

    def start() -> None:
        ready.wait()
        salts.append(load_salt(path))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(salts) == 4 and len(set(salts)) == 1
    assert [p.name for p in path.parent.iterdir()] == ["session-salt"], "no temporary salt left behind"
    material = ["system", "first user message"]
    first, second = SessionKeys(salts[0]), SessionKeys(load_salt(path))
    for api, header in (("openai", "authorization"), ("anthropic", "x-api-key"), ("gemini", "x-goog-api-key")):
        alice = first.key(api, {header: KEY_A}, "", material)
        assert second.key(api, {header: KEY_A}, "", material) == alice, f"{api}: continued on the other process"
        assert second.key(api, {header: KEY_B}, "", material) != alice, f"{api}: still only for its own key"


def test_another_home_keys_apart_until_the_salt_is_copied(tmp_path: Path) -> None:
    """Another machine's home makes its own salt: no conversation key crosses, even for one credential,
    until the salt file is copied into that home."""
    here, there = tmp_path / "here" / "session-salt", tmp_path / "there" / "session-salt"
    material = ["system", "first user message"]
    alice = SessionKeys(load_salt(here)).key("anthropic", {"x-api-key": KEY_A}, "", material)
    assert SessionKeys(load_salt(there)).key("anthropic", {"x-api-key": KEY_A}, "", material) != alice
    there.write_bytes(here.read_bytes())
    assert SessionKeys(load_salt(there)).key("anthropic", {"x-api-key": KEY_A}, "", material) == alice


def test_a_damaged_salt_file_stops_serve_with_one_line(tmp: Path) -> None:
    home = tmp / "home-damaged"
    home.mkdir()
    (home / "session-salt").write_text("not a salt\n")
    result = run_cli(home, "serve", "--port", "0", "--db", str(tmp / "damaged.db"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert str(home / "session-salt") in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- the key itself


# "sk-" cannot occur in a key (API names, hex digits and dashes), so a key holding the credential is a bug.
CREDENTIAL = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=60).map(
    lambda text: "sk-" + text
)


@given(CREDENTIAL, CREDENTIAL)
def test_property_keys_differ_by_credential_and_never_hold_it(one: str, other: str) -> None:
    keys = SessionKeys(bytes(range(32)))
    material = ["system", "first user message"]
    for api, header in (("openai", "authorization"), ("anthropic", "x-api-key"), ("gemini", "x-goog-api-key")):
        mine = keys.key(api, {header: one}, "", material)
        assert one not in mine and fingerprint_of(mine) is not None
        assert keys.key(api, {header: one}, "", material) == mine, "deterministic"
        assert (keys.key(api, {header: other}, "", material) == mine) == (one == other)
    shared = SessionKeys(None)
    assert shared.key("openai", {"authorization": one}, "", material) == shared.key("openai", {}, "", material)


def test_the_credential_is_read_per_provider() -> None:
    assert credential_parts("anthropic", {"x-api-key": "k1"}) == credential_parts(
        "anthropic", {"authorization": "Bearer k1"}
    )
    assert credential_parts("gemini", {}, "alt=sse&key=g1") == credential_parts("gemini", {"x-goog-api-key": "g1"})
    assert credential_parts("openai", {"x-goog-api-key": "g1"}) == [], "another provider's header is not OpenAI's key"
    assert credential_parts("openai", {}, "key=g1") == [], "a key query parameter is Gemini's only"
    assert credential_parts("openai", {"authorization": "Bearer   "}) == []
    keys = SessionKeys(b"s" * 32)
    assert keys.fingerprint("openai", {}) == NO_CREDENTIAL
    assert SessionKeys(b"t" * 32).fingerprint("openai", {"authorization": "Bearer k"}) != keys.fingerprint(
        "openai", {"authorization": "Bearer k"}
    ), "another salt, another fingerprint"


def test_the_salt_is_made_once_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "home" / "session-salt"
    salt = load_salt(path)
    assert len(salt) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_salt(path) == salt and [p.name for p in path.parent.iterdir()] == ["session-salt"]


def test_a_re_placed_block_never_joins_another_keys_conversation(tmp_path: Path) -> None:
    """aider's first request opens with its file-context pair, so its key changes on the second turn and the
    proxy finds the conversation by re-placement: only among the same credential's conversations."""
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, None), store=store)
    compaction = Compaction(router, Metrics())
    system = {"role": "system", "content": "Act as an expert software developer."}
    files = [
        {"role": "user", "content": "I am not sharing any files that you can edit yet."},
        {"role": "assistant", "content": "Ok."},
    ]
    first = [system, *files, {"role": "user", "content": "turn 0"}]
    second = [system, {"role": "user", "content": "turn 0"}, {"role": "assistant", "content": "answer 0"}, *files]
    second.append({"role": "user", "content": "turn 1"})
    keys = SessionKeys(b"k" * 32)
    provider = OpenAIFormat()

    def key(credential: str, history: list[dict[str, Any]]) -> str:
        return keys.key(
            "openai", {"authorization": f"Bearer {credential}"}, "", provider.key_material({"messages": history})
        )

    try:
        alice = compaction.prepare(provider, {}, key(KEY_A, first), first)
        bob = compaction.prepare(provider, {}, key(KEY_B, second), second)
        again = compaction.prepare(provider, {}, key(KEY_A, second), second)
        assert alice.session is not None and bob.session is not None and again.session is not None
        assert bob.session.session_id != alice.session.session_id, "another key's replay is its own conversation"
        assert again.session.session_id == alice.session.session_id, "the same key still continues by re-placement"
    finally:
        router.close()
        store.close()
