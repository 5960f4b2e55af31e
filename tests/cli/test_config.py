"""Config loading and validation errors."""

import os
import time

import pytest
from typer.testing import CliRunner

from microcompact.cli import app
from microcompact.config import Config, ConfigError, load_config, parse_config


def test_defaults():
    c = Config()
    assert c.compression.threshold == 0.5 and c.compression.target_ratio == 0.2
    assert c.compression.protect_first_n == 3 and c.compression.micro_compact is None  # None: off in a Session
    assert c.compression.micro_compact_defrag_threshold_tokens == 2000
    assert c.compression.micro_compact_max_exchange_tokens is None and c.piece_budget_tokens() == 8000
    assert c.compression.micro_compact_min_reclaim_tokens == 0
    assert c.threshold_tokens() is None
    c2 = parse_config({"model": {"context_length": 200_000}})
    assert c2.threshold_tokens() == 100_000 and c2.tail_budget_tokens() == 20_000


def test_cadence_zero_means_one_and_a_negative_or_huge_cadence_is_refused():
    compression = parse_config({"compression": {"micro_compact_every_n_turns": 0}}).compression
    assert compression.micro_compact_every_n_turns == 1  # Hermes writes 0 for "every turn"
    for n, bound in ((-4, "ge 1"), (-5, "ge 1"), (10**23, "le 10000")):
        with pytest.raises(ConfigError) as exc:
            parse_config({"compression": {"micro_compact_every_n_turns": n}}, source="cfg.yaml")
        assert "compression.micro_compact_every_n_turns" in str(exc.value) and bound in str(exc.value)


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"compression": {"threshold": 1.5}}, ["compression.threshold", "1.5", "le 1.0"]),
        ({"compression": {"protect_first_n": -1}}, ["compression.protect_first_n", "ge 0"]),
        ({"compression": {"micro_compactt": True}}, ["compression.micro_compactt", "unknown key"]),
        ({"auxiliary": {"compression": {"provider": "nope"}}}, ["auxiliary.compression.provider"]),
        ({"model": {"context_length": "big"}}, ["model.context_length", "'big'"]),
        ([1, 2], ["top level must be a mapping"]),
    ],
)
def test_errors_name_key_value_and_range(data, fragments):
    with pytest.raises(ConfigError) as exc:
        parse_config(data, source="cfg.yaml")
    for f in fragments:
        assert f in str(exc.value)
    assert "cfg.yaml" in str(exc.value)


def test_load_yaml_file_and_bad_yaml(tmp_path, monkeypatch):
    p = tmp_path / "c.yaml"
    p.write_text("compression:\n  micro_compact: true\n  threshold: 0.6\nmodel:\n  context_length: 64000\n")
    c = load_config(p)
    assert c.compression.micro_compact and c.threshold_tokens() == 38400
    bad = tmp_path / "bad.yaml"
    bad.write_text("compression:\n  threshold: [0.5\n")
    with pytest.raises(ConfigError, match=r"invalid YAML in .*bad\.yaml:"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path))
    (tmp_path / "config.yaml").write_text("compression: {micro_compact: true}\n")
    assert load_config().compression.micro_compact


def test_with_overrides_ignores_none_and_validates():
    c = Config().with_overrides(compression={"micro_compact": True, "threshold": None}, model={"context_length": 9000})
    assert c.compression.micro_compact and c.compression.threshold == 0.5 and c.model.context_length == 9000
    with pytest.raises(ConfigError):
        Config().with_overrides(compression={"threshold": 7})


# --------------------------------------------------------------------------- issue 8: items 10, 11, 12

# About 300 bytes that expand to 9**9 strings once built ("billion laughs").
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def run_cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def demo(tmp_path, monkeypatch):
    monkeypatch.setenv("MICROCOMPACT_HOME", str(tmp_path / "home"))
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n', encoding="utf-8")
    return path


def test_yaml_alias_bomb_is_refused_fast_naming_the_line(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(ALIAS_BOMB, encoding="utf-8")
    assert len(ALIAS_BOMB.encode()) < 320
    start = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert time.perf_counter() - start < 1.0
    message = str(exc.value)
    assert f"{p}:1:" in message and "anchor" in message and "\n" not in message


@pytest.mark.parametrize(
    "text, line",
    [
        ("model: &m {context_length: 64000}\n", 1),
        ("base: &base {threshold: 0.5}\ncompression:\n  <<: *base\n", 1),
        ("compression:\n  threshold: 0.5\nmodel:\n  context_length: *x\n", 4),
    ],
)
def test_any_anchor_or_alias_is_refused(tmp_path, text, line):
    p = tmp_path / "c.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{p}:{line}:\d+: YAML (anchor|alias)"):
        load_config(p)


def test_non_utf8_config_names_the_file_and_byte_offset(tmp_path, demo):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("compression:\n  threshold: 0.5  # café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    offset = p.read_bytes().index(b"\xe9")
    assert str(p) in str(exc.value) and f"offset {offset}" in str(exc.value) and "\n" not in str(exc.value)
    result = run_cli("replay", demo, "--config", p)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"offset {offset}" in result.stderr


def test_utf8_config_with_a_byte_order_mark_loads(tmp_path):
    p = tmp_path / "bom.yaml"
    p.write_bytes("\ufeffmodel:\n  context_length: 64000\n".encode("utf-8"))
    assert load_config(p).model.context_length == 64000


@pytest.mark.parametrize(
    "url", ["::::x", "ftp://example.com", "http://", "localhost:8000/v1", "http://h:99999/v1", "https:///v1"]
)
def test_base_url_must_be_http_with_a_host(url):
    with pytest.raises(ConfigError) as exc:
        parse_config({"auxiliary": {"compression": {"provider": "openai", "base_url": url}}}, source="cfg.yaml")
    assert "auxiliary.compression.base_url" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://[::1]:11434/v1", "https://openrouter.ai/api/v1"],
)
def test_good_base_urls_pass(url):
    assert parse_config({"auxiliary": {"compression": {"base_url": url}}}).auxiliary.compression.base_url == url


def test_bad_base_url_flag_and_yaml_exit_2_naming_the_key(tmp_path, demo):
    result = run_cli("replay", demo, "--base-url", "::::x")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "auxiliary.compression.base_url" in result.stderr and "--base-url" in result.stderr
    p = tmp_path / "c.yaml"
    p.write_text("auxiliary:\n  compression:\n    base_url: ftp://x\n", encoding="utf-8")
    result = run_cli("replay", demo, "--config", p)
    assert result.exit_code == 2 and "auxiliary.compression.base_url" in result.stderr


SECRET = "sk-proj-" + "Xq7Lm2Vb9Tn4Rk8Wp3Zs6Hd1Jf5Gc0Ya"


@pytest.mark.parametrize(
    "data",
    [
        {"auxiliary": {"compression": {"api_key": SECRET}}},
        {"auxiliary": {"compression": {"provider": "openai", "api_key": {"value": SECRET}}}},
        {"model": {"token": SECRET}},
        {"auxiliary": {"compression": {"model": f"gpt with {SECRET}", "timeout": f"{SECRET}"}}},
    ],
)
def test_config_errors_never_print_a_key(data, tmp_path, demo):
    with pytest.raises(ConfigError) as exc:
        parse_config(data, source="cfg.yaml")
    assert SECRET not in str(exc.value)
    p = tmp_path / "c.yaml"
    import yaml

    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli("replay", demo, "--config", p)
    assert result.exit_code == 2 and SECRET not in result.output


def test_api_key_in_config_says_where_keys_belong():
    with pytest.raises(ConfigError) as exc:
        parse_config({"auxiliary": {"compression": {"api_key": SECRET}}}, source="cfg.yaml")
    assert "auxiliary.compression.api_key: unknown key" in str(exc.value)
    assert "api_key_env" in str(exc.value) and "hidden" in str(exc.value)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("explicit", [True, False])
def test_agent_log_is_created_private(tmp_path, demo, explicit):
    log = tmp_path / "logs" / "run.log" if explicit else tmp_path / "home" / "logs" / "agent.log"
    old = os.umask(0o022)
    try:
        result = run_cli("replay", demo, *(["--log", log] if explicit else []))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert log.exists() and (os.stat(log).st_mode & 0o777) == 0o600
