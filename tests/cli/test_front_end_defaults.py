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
from microcompact.server.run import SERVE_DEFAULTS, proxy_config
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
    assert serve_choices(served) == {**SERVE_DEFAULTS, "micro_compact_schedule": "price"}
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
