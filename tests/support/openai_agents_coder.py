"""The Agents SDK's side of the OpenAI Agents adapter tests: ``support.agent_script``'s coding agent as an
``Agent`` whose model is a real ``AsyncOpenAI`` client of a local chat server, and its ``read_file`` tool.

Importing this module imports the Agents SDK (about a second of CPU, openai and mcp with it) and turns its
tracing off for the process: the test file binds it with ``support.lazy_sdk.lazy``, so only the worker that
runs one of its tests pays for the import, not every xdist worker that collects the file.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from support.agent_script import tool_output
from support.chat_server import ChatServer

set_tracing_disabled(True)


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    turn, step = (int(x) for x in path.removeprefix("src/module_").removesuffix(".py").split("_"))
    return tool_output(turn, step)


def coder_agent(server: ChatServer) -> Agent[Any]:
    """The coding agent, its model served by ``server``."""
    model = OpenAIChatCompletionsModel("scripted", AsyncOpenAI(base_url=server.base_url, api_key="test"))
    return Agent(name="coder", instructions="You fix bugs.", model=model, tools=[read_file])
