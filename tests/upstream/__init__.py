"""A scripted OpenAI + Anthropic upstream for tests of clients and of the proxy (see ``server.py``)."""

from .recorded import RecordedRequest, Script
from .replies import (
    Answer,
    Fault,
    RedactedThinking,
    Reply,
    Text,
    Thinking,
    ToolCall,
    disconnect,
    error,
    garbage,
    hang,
    text,
    tool_call,
)
from .server import ScriptedUpstream, default_script
from .usage import DEFAULT_OVERHEAD, PromptCache, prompt_tokens

__all__ = [
    "Answer",
    "Fault",
    "RedactedThinking",
    "Reply",
    "Text",
    "Thinking",
    "ToolCall",
    "disconnect",
    "error",
    "garbage",
    "hang",
    "text",
    "tool_call",
    "RecordedRequest",
    "Script",
    "ScriptedUpstream",
    "default_script",
    "DEFAULT_OVERHEAD",
    "PromptCache",
    "prompt_tokens",
]
