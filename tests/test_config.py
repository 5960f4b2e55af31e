"""Config loading and validation errors."""

import pytest

from microcompact.config import Config, ConfigError, load_config, parse_config


def test_defaults():
    c = Config()
    assert c.compression.threshold == 0.5 and c.compression.target_ratio == 0.2
    assert c.compression.protect_first_n == 3 and c.compression.micro_compact is False
    assert c.compression.micro_compact_defrag_threshold_tokens == 2000
    assert c.compression.micro_compact_max_exchange_tokens == 8000
    assert c.compression.micro_compact_min_reclaim_tokens == 0
    assert c.threshold_tokens() is None
    c2 = parse_config({"model": {"context_length": 200_000}})
    assert c2.threshold_tokens() == 100_000 and c2.tail_budget_tokens() == 20_000


def test_cadence_below_one_is_clamped():
    assert parse_config({"compression": {"micro_compact_every_n_turns": 0}}).compression.micro_compact_every_n_turns == 1
    assert parse_config({"compression": {"micro_compact_every_n_turns": -4}}).compression.micro_compact_every_n_turns == 1


@pytest.mark.parametrize("data, fragments", [
    ({"compression": {"threshold": 1.5}}, ["compression.threshold", "1.5", "le 1.0"]),
    ({"compression": {"protect_first_n": -1}}, ["compression.protect_first_n", "ge 0"]),
    ({"compression": {"micro_compactt": True}}, ["compression.micro_compactt", "unknown key"]),
    ({"auxiliary": {"compression": {"provider": "nope"}}}, ["auxiliary.compression.provider"]),
    ({"model": {"context_length": "big"}}, ["model.context_length", "'big'"]),
    ([1, 2], ["top level must be a mapping"]),
])
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
    with pytest.raises(ConfigError, match="invalid YAML in .*bad.yaml:"):
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
