"""LangChain's side of the LangChain adapter tests: ``support.agent_script``'s coding agent as a chat model,
its ``read_file`` tool, and a chat model that writes summaries.

They subclass and decorate LangChain's own classes, so importing this module imports LangChain (about a
second of CPU): the test file binds it with ``support.lazy_sdk.lazy``, and only the worker that runs one of
its tests pays for that, not every xdist worker that collects the file.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from microcompact.integrations.langchain import to_openai
from support.agent_script import ITERATIONS_PER_TURN, tool_output, tool_path


class ScriptedCoder(BaseChatModel):
    """Reads a file per call until a turn has had its iterations, then answers; records what it was sent."""

    log: Any
    steps: dict[int, int] = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "scripted-coder"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedCoder:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        sent = [to_openai(m) for m in messages if not isinstance(m, SystemMessage)]
        self.log.requests.append(sent)
        turn = sum(1 for m in sent if m["role"] == "user") - 1
        step = self.steps.get(turn, 0)
        self.steps[turn] = step + 1
        if step < ITERATIONS_PER_TURN:
            call = {"name": "read_file", "args": {"path": tool_path(turn, step)}, "id": f"call_{turn}_{step}"}
            reply = AIMessage(content=f"Reading {tool_path(turn, step)}.", tool_calls=[call])
        else:
            reply = AIMessage(content=f"Turn {turn} done: the bug is in {tool_path(turn, 0)}.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    turn, step = (int(x) for x in path.removeprefix("src/module_").removesuffix(".py").split("_"))
    return tool_output(turn, step)


class SummaryModel(BaseChatModel):
    """A chat model that summarizes by saying how much it read."""

    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "summary-model"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.prompts.append("\n".join(m.text for m in messages))
        reply = AIMessage(f"### Decisions\n- read {len(self.prompts[-1])} characters")
        return ChatResult(generations=[ChatGeneration(message=reply)])
