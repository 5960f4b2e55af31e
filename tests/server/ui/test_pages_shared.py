"""Two proxies on one PostgreSQL database: a conversation driven through one is on the other's page, figure for
figure (the page reads the store, not the memory of the process that served the conversation)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from support import local_http
from support.proxy_server import ProxyServer
from support.stores import FreshPgDatabase
from support.ui_pages import drive
from upstream import ScriptedUpstream


@pytest.fixture
def pg_database(pg_dsn: str) -> Iterator[str]:
    db = FreshPgDatabase(pg_dsn)
    try:
        yield db.dsn
    finally:
        db.drop()


def test_another_serve_on_the_same_postgres_shows_the_same_page(
    upstream: ScriptedUpstream, pg_database: str, tmp_path: Path
) -> None:
    salt = tmp_path / "salt"
    with (
        ProxyServer(upstream.base_url, pg_database, context_limit=16_000, salt_file=salt) as writer,
        ProxyServer(upstream.base_url, pg_database, context_limit=16_000, salt_file=salt) as reader,
    ):
        session, requests = drive(writer)
        mine = local_http.get(f"{writer.base_url}/ui/api/conversation", params={"id": session}).json()
        theirs = local_http.get(f"{reader.base_url}/ui/api/conversation", params={"id": session}).json()
        assert theirs == mine and theirs["requests"] == requests and theirs["folds"] >= 1
        page = local_http.get(f"{reader.base_url}/ui/{quote(session, safe='')}").text
        assert page.count('<circle class="pt') == requests
