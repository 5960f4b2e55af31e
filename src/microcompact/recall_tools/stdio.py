"""``microcompact mcp``: the recall tools served over MCP's stdio transport (the ``mcp`` SDK).

The store is opened read-only: the server never writes, and a mistyped location creates nothing. Tool
failures the caller can fix (a forged capability, another conversation's handle, a huge query) come back as
the tool's error text, one line; a store failure the same way, naming the store and never its data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from ..store import StoreError
from .note import EXPAND_DESCRIPTION, RECALL_DESCRIPTION
from .originals import OriginalsStore
from .reader import DEFAULT_HITS, MAX_HITS, MAX_QUERY_CHARS, Originals, RecallRefused

SERVER_NAME = "microcompact"
INSTRUCTIONS = (
    "Earlier turns of this conversation were folded into a summary by microcompact. The summary's note gives "
    "the conversation's capability and its handle: recall searches the folded originals, expand reads one."
)
Conversation = Annotated[str, Field(description="The conversation value from the compaction summary's note.")]


def build_server(store: OriginalsStore) -> MCPServer:
    """The MCP server offering ``recall`` and ``expand`` over ``store``."""
    originals = Originals(store)
    server: MCPServer = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(name="recall", description=RECALL_DESCRIPTION, structured_output=False)
    def recall(
        conversation: Conversation,
        query: Annotated[str, Field(description=f"Identifiers or words to find (at most {MAX_QUERY_CHARS}).")],
        limit: Annotated[int, Field(description=f"How many matches (1-{MAX_HITS}).")] = DEFAULT_HITS,
    ) -> str:
        return _answer(lambda: originals.recall(conversation, query, limit))

    @server.tool(name="expand", description=EXPAND_DESCRIPTION, structured_output=False)
    def expand(
        conversation: Conversation,
        handle: Annotated[str, Field(description="A handle such as m1042, from recall or from the summary.")],
    ) -> str:
        return _answer(lambda: originals.expand(conversation, handle))

    return server


def _answer(call: Callable[[], str]) -> str:
    try:
        return call()
    except (RecallRefused, StoreError) as exc:
        raise ToolError(str(exc)) from None


def serve_stdio(store: OriginalsStore) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    build_server(store).run("stdio")
