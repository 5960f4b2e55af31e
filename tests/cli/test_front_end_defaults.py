"""Settings whose default depends on the front end are None ("derive") in a config, never "was it set".

A library ``Session`` reads them as off (inline, not cache-aware); ``serve`` (``proxy_config``) puts in its
own defaults and ``replay`` its own, where a config leaves them unset; whatever a file says stays. So a config
says the same after a round trip through ``model_dump``: a dumped default config given to ``serve`` or
``replay`` behaves as no config at all did (once, every dumped field counted as set: micro-compaction off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from microcompact.cli.replay_command import ReplayRequest, configure
from microcompact.config import Config, parse_config
from microcompact.micro.policy import CadencePolicy
from microcompact.server.run import SERVE_DEFAULTS, ServeOptions, proxy_config, serve
from microcompact.session import Session

SERVE_CHOICES = (
    "micro_compact",
    "micro_compact_background",
    "micro_compact_cache_ttl_seconds",
    "micro_compact_schedule",
)


def written(tmp_path: Path, data: dict[str, Any], name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def serve_choices(config: Config) -> dict[str, Any]:
    dumped = config.compression.model_dump()
    return {k: dumped[k] for k in SERVE_CHOICES}


def replay_request(config: Path | None) -> ReplayRequest:
    return ReplayRequest(transcript=Path("unused.jsonl"), config=config)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))  # no config.yaml of the developer's
    return tmp_path / "home"


def test_the_defaults_are_left_to_derive_and_a_library_session_reads_them_as_off() -> None:
    compression = Config().compression
    assert compression.micro_compact is None and compression.micro_compact_background is None
    assert compression.micro_compact_cache_ttl_seconds is None and compression.micro_compact_schedule == "auto"
    with Session(Config()) as session:
        assert not session.micro.active and session.background is None
        assert not CadencePolicy(session.config).cache_aware


def test_serve_fills_in_its_defaults_and_a_dumped_default_config_changes_nothing(tmp_path: Path) -> None:
    served = proxy_config(None, 100_000)
    assert serve_choices(served) == {
        **SERVE_DEFAULTS,
        "micro_compact_background": False,  # the extractive summarizer: passes inline
        "micro_compact_schedule": "price",
    }
    # The dumped default config, every field written out, given to serve as its file.
    dumped = written(tmp_path, Config().model_dump())
    assert proxy_config(dumped, 100_000) == served
    # serve's own result survives the round trip too: parsed back, and given to serve again.
    again = parse_config(served.model_dump())
    assert again == served and proxy_config(written(tmp_path, again.model_dump(), "again.yaml"), 100_000) == served


def test_what_a_file_says_stays_under_serve(tmp_path: Path) -> None:
    said = {
        "micro_compact": False,
        "micro_compact_background": False,
        "micro_compact_cache_ttl_seconds": 0,
        "micro_compact_schedule": "cadence",
    }
    served = proxy_config(written(tmp_path, {"compression": said}), 100_000)
    assert serve_choices(served) == said
    assert not CadencePolicy(served).cache_aware  # 0: not cache-aware, as an unset TTL in a library session
    ttl = proxy_config(written(tmp_path, {"compression": {"micro_compact_cache_ttl_seconds": 60}}, "ttl.yaml"), None)
    assert ttl.compression.micro_compact_cache_ttl_seconds == 60 and CadencePolicy(ttl).cache_aware


def background(config: Path | None, summarizer: str | None = None) -> bool | None:
    return proxy_config(config, 100_000, summarizer).compression.micro_compact_background


def test_serve_derives_background_passes_from_the_summarizer_and_what_a_file_says_wins(tmp_path: Path) -> None:
    """Inline for the extractive summarizer (a fold is milliseconds of CPU), in the background for one that
    calls a model (an endpoint, or the client's own: upstream); --summarizer counts as the file's would."""
    model = {"provider": "openai", "model": "small", "base_url": "http://127.0.0.1:9/v1"}
    endpoint = written(tmp_path, {"auxiliary": {"compression": model}}, "model.yaml")
    extractive = written(tmp_path, {"auxiliary": {"compression": {"provider": "extractive"}}}, "extractive.yaml")
    assert background(None) is False and background(extractive) is False
    assert background(endpoint) is True and background(None, "upstream") is True
    assert background(endpoint, "extractive") is False, "--summarizer beats the file's provider"
    # An explicit value wins either way, for any summarizer.
    for said in (True, False):
        explicit = {"compression": {"micro_compact_background": said}}
        with_model = written(tmp_path, {**explicit, "auxiliary": {"compression": model}}, "set-model.yaml")
        alone = written(tmp_path, explicit, "set.yaml")
        assert background(with_model) is said and background(alone) is said
        assert background(alone, "upstream") is said and background(with_model, "extractive") is said
    # What serve derived stays through a dump: the dumped config says it explicitly.
    served = proxy_config(endpoint, 100_000)
    assert proxy_config(written(tmp_path, served.model_dump(), "dumped.yaml"), 100_000) == served


def test_serve_says_at_startup_how_its_passes_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr("uvicorn.Server.run", lambda self, sockets: [sock.close() for sock in sockets])
    serve(ServeOptions(port=0, db=str(tmp_path / "s.db")), said.append)
    serve(ServeOptions(port=0, db=str(tmp_path / "s.db"), summarizer="upstream"), said.append)
    config = written(tmp_path, {"compression": {"micro_compact": False}}, "off.yaml")
    serve(ServeOptions(config=config, port=0, db=str(tmp_path / "s.db")), said.append)
    lines = [line for text in said for line in text.splitlines() if line.startswith("micro-compaction")]
    assert lines == [
        "micro-compaction passes inline, at the request that is due (summarizer: extractive)",
        "micro-compaction passes in the background (summarizer: upstream)",
        "micro-compaction off",
    ]


def test_replay_turns_micro_compaction_on_unless_the_file_or_the_flag_says_otherwise(tmp_path: Path) -> None:
    assert configure(replay_request(None)).compression.micro_compact is True
    assert configure(replay_request(written(tmp_path, Config().model_dump()))).compression.micro_compact is True
    off = written(tmp_path, {"compression": {"micro_compact": False}}, "off.yaml")
    assert configure(replay_request(off)).compression.micro_compact is False
    flagged = ReplayRequest(transcript=Path("unused.jsonl"), config=written(tmp_path, {}, "empty.yaml"), micro=False)
    assert configure(flagged).compression.micro_compact is False


def test_with_defaults_fills_only_what_is_left_to_derive() -> None:
    config = parse_config({"compression": {"micro_compact": False}})
    filled = config.with_defaults(compression={"micro_compact": True, "micro_compact_background": True})
    assert filled.compression.micro_compact is False and filled.compression.micro_compact_background is True
    assert filled.with_defaults(compression={"micro_compact_background": False}) == filled
