"""What each agent is started with (``microcompact.launch.agents``): the proxy's address in the variable or
flag the client reads, its own compaction pushed past the proxy's, the user's arguments after ours and
unchanged, the Codex provider named "OpenAI" only in front of OpenAI's own API."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from microcompact.launch import SPECS, Agent, Launch, LaunchRequest, Upstreams, WireApi
from microcompact.launch.agents import NEVER_TOKENS, codex_provider_name

PROXY = "http://127.0.0.1:8765"
USER_ARGS = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12))


def build(agent: Agent, args: list[str], tmp: Path, upstreams: Upstreams | None = None, **environ: str) -> Launch:
    request = LaunchRequest(PROXY, upstreams or Upstreams(), f"/opt/bin/{agent.value}", args, environ, tmp)
    return SPECS[agent].build(request)


@given(args=USER_ARGS)
def test_the_users_arguments_come_last_and_unchanged(args: list[str]) -> None:
    for agent in Agent:
        launch = build(agent, args, Path("/nonexistent"))
        assert launch.argv[0] == f"/opt/bin/{agent.value}"
        assert launch.argv[len(launch.argv) - len(args) :] == args


def test_claude_code_points_at_the_proxy_and_never_compacts_itself(tmp_path: Path) -> None:
    launch = build(Agent.CLAUDE, ["-p", "hi"], tmp_path, ANTHROPIC_API_KEY="sk-ant-secret")
    assert launch.env == {"ANTHROPIC_BASE_URL": PROXY, "DISABLE_AUTO_COMPACT": "1"}
    assert launch.argv[1:] == ["-p", "hi"] and not launch.files
    env = launch.environment({"ANTHROPIC_API_KEY": "sk-ant-secret", "ANTHROPIC_BASE_URL": "https://elsewhere"})
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-secret" and env["ANTHROPIC_BASE_URL"] == PROXY
    for window in ("CLAUDE_CODE_DISABLE_1M_CONTEXT", "_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL"):
        assert window not in launch.env  # the client's own window is kept (see launch/agents.py)


def codex_config(argv: list[str]) -> dict[str, object]:
    """The ``-c key=value`` overrides as Codex reads them: TOML values under dotted keys."""
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-c"]
    return tomllib.loads("\n".join(pairs))


def test_codex_gets_a_provider_at_the_proxy_through_overrides(tmp_path: Path) -> None:
    launch = build(Agent.CODEX, ["exec", "hello"], tmp_path, Upstreams(openai="http://127.0.0.1:9/v1"))
    config = codex_config(launch.argv)
    assert config["model_provider"] == "microcompact"
    assert config["model_providers"] == {
        "microcompact": {
            "name": "microcompact (via serve)",
            "base_url": f"{PROXY}/v1",
            "wire_api": "responses",
            "env_key": "OPENAI_API_KEY",
        }
    }
    assert set(config) == {"model_provider", "model_providers"}, "Codex's own trigger is left as it is"
    assert launch.argv[-2:] == ["exec", "hello"] and launch.env == {}


@given(
    host=st.sampled_from(["api.openai.com", "API.OPENAI.COM", "api.openai.com.evil.test", "localhost", "127.0.0.1"]),
    scheme=st.sampled_from(["https", "http"]),
    port=st.sampled_from(["", ":443", ":8080"]),
)
def test_codex_names_its_provider_openai_only_for_openais_own_api(host: str, scheme: str, port: str) -> None:
    name = codex_provider_name(Upstreams(openai=f"{scheme}://{host}{port}/v1"))
    assert (name == "OpenAI") == (host.lower() == "api.openai.com")


def test_the_default_upstream_gets_the_openai_name(tmp_path: Path) -> None:
    launch = build(Agent.CODEX, [], tmp_path)
    assert codex_config(launch.argv)["model_providers"]["microcompact"]["name"] == "OpenAI"  # type: ignore[index]


def test_gemini_cli_gets_the_base_url_and_compresses_only_at_its_whole_window(tmp_path: Path) -> None:
    machine = tmp_path / "system-settings.json"
    machine.write_text(json.dumps({"model": {"name": "gemini-x", "compressionThreshold": 0.3}, "ui": {"theme": "a"}}))
    launch = build(Agent.GEMINI, ["-p", "hi"], tmp_path, GEMINI_CLI_SYSTEM_SETTINGS_PATH=str(machine))
    [(path, text)] = launch.files.items()
    assert launch.env == {"GOOGLE_GEMINI_BASE_URL": PROXY, "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(path)}
    assert path.parent == tmp_path and path != machine
    assert json.loads(text) == {"model": {"name": "gemini-x", "compressionThreshold": 1.0}, "ui": {"theme": "a"}}
    unreadable = build(Agent.GEMINI, [], tmp_path, GEMINI_CLI_SYSTEM_SETTINGS_PATH=str(tmp_path / "missing.json"))
    assert [json.loads(t) for t in unreadable.files.values()] == [{"model": {"compressionThreshold": 1.0}}]


def test_aider_reaches_the_proxy_for_both_apis_and_keeps_its_history_whole(tmp_path: Path) -> None:
    launch = build(Agent.AIDER, ["--model", "gpt-4o", "--max-chat-history-tokens", "2048"], tmp_path)
    assert launch.env == {"OPENAI_API_BASE": f"{PROXY}/v1", "ANTHROPIC_API_BASE": PROXY}
    # ours first, so a user's own --max-chat-history-tokens (argparse: the last one wins) stands
    user = ["--model", "gpt-4o", "--max-chat-history-tokens", "2048"]
    assert launch.argv[1:] == ["--max-chat-history-tokens", str(NEVER_TOKENS), *user]


def test_each_agent_says_what_it_speaks_and_where_to_get_it() -> None:
    assert [SPECS[a].api for a in Agent] == [
        WireApi.MESSAGES,
        WireApi.RESPONSES,
        WireApi.GEMINI,
        WireApi.CHAT,
    ]
    assert [SPECS[a].binary_env for a in Agent] == [
        "MICROCOMPACT_CLAUDE_BIN",
        "MICROCOMPACT_CODEX_BIN",
        "MICROCOMPACT_GEMINI_BIN",
        "MICROCOMPACT_AIDER_BIN",
    ]
    assert all(SPECS[a].install for a in Agent)
