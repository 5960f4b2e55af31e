"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chat_server import ChatServer


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A local OpenAI-compatible server (see ``chat_server.py``), closed after the test."""
    with ChatServer() as server:
        yield server
