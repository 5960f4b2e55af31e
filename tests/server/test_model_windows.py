"""A window per model, not per process; a fixed overhead above the threshold reported once, with no batch
pass per request that cannot get under it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from microcompact.config import ConfigError, load_config
from microcompact.router import SessionRouter
from microcompact.server.compaction import Compaction
from microcompact.server.metrics import Metrics
from microcompact.server.model_windows import ModelWindows, reachable_threshold
from microcompact.server.openai_format import OpenAIFormat
from microcompact.server.run import ServeOptions, proxy_config, serve
from microcompact.store import open_store
from microcompact.windows import DEFAULT_WINDOW, Windows

OA = OpenAIFormat()


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-opus-5-5", 1_000_000),
        ("claude-fable-5-2", 1_000_000),
        ("claude-mythos-5-1", 1_000_000),
        ("claude-haiku-5-5", 200_000),
        ("claude-sonnet-4-5-20250929", 200_000),
        ("claude-opus-5-5[1m]", 1_000_000),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", 200_000),
        ("gpt-4o-2024-08-06", 128_000),
        ("openai/gpt-4o", 128_000),
        ("gpt-4", 8_192),
        ("gpt-4.1-mini", 1_047_576),
        ("gpt-5-codex", 272_000),
        ("o3-mini", 200_000),
        ("o1-mini", 128_000),
        ("models/gemini-2.5-pro", 1_048_576),
        ("gemini-1.5-pro-002", 2_097_152),
    ],
)
def test_the_table_knows_current_models(model: str, window: int) -> None:
    assert Windows({}).window(model) == window


def test_unknown_models_get_the_limit_or_the_stated_default_and_the_limit_caps() -> None:
    assert Windows({}).window("qwen3-coder-local") == DEFAULT_WINDOW
    assert Windows({}).window(None) == DEFAULT_WINDOW
    assert Windows({}, limit=32_000).window("qwen3-coder-local") == 32_000
    assert Windows({}, limit=32_000).window("claude-opus-5-5") == 32_000, "--context-limit caps the table"
    assert Windows({}, limit=500_000).window("gpt-4o") == 128_000


def test_the_config_overrides_and_extends_the_table(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  qwen3-coder: 65536\n  gpt-4o: 64000\n")
    config = load_config(path)
    windows = Windows(dict(config.models))
    assert windows.window("qwen3-coder-30b") == 65_536 and windows.window("gpt-4o-mini") == 64_000
    assert windows.window("claude-opus-5-5") == 1_000_000


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("models:\n  m: 100\n", "models.m"),
        ("models:\n  m: lots\n", "models.m"),
        ("models:\n  m: true\n", "models.m"),
        ("models: [a, b]\n", "models"),
        ("modles:\n  m: 64000\n", "modles: unknown key"),
    ],
)
def test_a_bad_models_section_is_one_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        load_config(path)


def test_each_conversation_gets_its_models_window(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    router = SessionRouter(proxy_config(None, None), store=store)
    compaction = Compaction(router, Metrics())
    windows = {}
    for key, model in [("a", "claude-haiku-5-5"), ("b", "gpt-4o"), ("c", "local-model")]:
        prepared = compaction.prepare(OA, {"model": model}, key, [{"role": "user", "content": f"hi {key}"}])
        assert prepared.session is not None
        windows[model] = prepared.session.config.model.context_length
    assert windows == {"claude-haiku-5-5": 200_000, "gpt-4o": 128_000, "local-model": DEFAULT_WINDOW}
    router.close()
    store.close()


def test_serve_says_which_window_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []

    class Stop(Exception):
        pass

    def no_server(self: object, sockets: object) -> None:
        raise Stop

    monkeypatch.setattr("uvicorn.Server.run", no_server)
    with pytest.raises(Stop):
        serve(ServeOptions(port=0, db=str(tmp_path / "s.db")), said.append)
    assert "context window per request model" in said[0] and f"unknown models: {DEFAULT_WINDOW:,}" in said[0]
    said.clear()
    with pytest.raises(Stop):
        serve(ServeOptions(port=0, db=str(tmp_path / "s.db"), context_limit=32_000), said.append)
    assert "capped at --context-limit 32,000; unknown models: 32,000" in said[0]


def test_a_threshold_the_fixed_part_is_above_moves_to_the_room_left() -> None:
    assert reachable_threshold(0.5, 32_000, 10_000) == 0.5
    assert reachable_threshold(0.5, 32_000, 16_700) == pytest.approx((16_700 + 0.5 * 15_300) / 32_000)
    assert reachable_threshold(0.5, 32_000, 40_000) == 1.0


def qwen_like_body(model: str = "qwen3-coder") -> dict[str, object]:
    """A request whose tool schemas alone are above a 32K window's threshold (Qwen Code: 6.9K + 9.8K)."""
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": " ".join(["describe"] * 900)}}
        for i in range(20)
    ]
    return {"model": model, "tools": tools}


def test_a_fixed_overhead_above_the_threshold_is_reported_once_and_runs_no_batch_per_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(tmp_path / "s.db")
    config = proxy_config(None, 32_000)
    router = SessionRouter(config, store=store)
    compaction = Compaction(router, Metrics())
    body = qwen_like_body()
    fixed = ModelWindows(config).counter.count_text(str(body["tools"]))
    assert fixed > (config.threshold_tokens() or 0)
    history: list[dict[str, object]] = [{"role": "system", "content": "You are Qwen Code."}]
    outcomes: list[str] = []
    with caplog.at_level(logging.WARNING, logger="microcompact"):
        for turn in range(8):
            history += [{"role": "user", "content": f"step {turn} " + "word " * 200}]
            prepared = compaction.prepare(OA, body, "q", history)
            assert prepared.session is not None
            # The upstream reports the tools in every prompt: calibration learns the overhead.
            compaction.answered(prepared, prepared.counted_tokens + fixed)
            compaction.follow_up("q")
            outcomes += prepared.outcomes
            history += [{"role": "assistant", "content": f"done {turn}"}]
    reports = [r for r in caplog.records if "no compaction can shorten" in r.getMessage()]
    assert len(reports) == 1 and "--context-limit" in reports[0].getMessage()
    assert not [o for o in outcomes if o not in ("absorbed", "defrag")], f"no batch pass per request: {outcomes}"
    assert prepared.session is not None
    assert (prepared.session.config.threshold_tokens() or 0) > fixed
    router.close()
    store.close()
