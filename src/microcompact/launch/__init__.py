"""``microcompact claude|codex|gemini|aider [ARGS...]``: an agent run through ``serve``, its own compaction
deferring to the proxy's (``agents``: what each agent is given; ``lifecycle``: the proxy found or started,
the agent run, the proxy stopped)."""

from .agents import SPECS, Agent, AgentSpec, Launch, LaunchRequest, Upstreams, WireApi
from .lifecycle import LaunchError, ServeSettings, launch

__all__ = [
    "SPECS",
    "Agent",
    "AgentSpec",
    "Launch",
    "LaunchError",
    "LaunchRequest",
    "ServeSettings",
    "Upstreams",
    "WireApi",
    "launch",
]
