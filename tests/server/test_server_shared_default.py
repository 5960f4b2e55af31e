"""``serve`` shares its store with other ``serve`` processes by default on PostgreSQL (the store several
processes use), not on SQLite; ``--shared`` / ``--no-shared`` decide either way."""

from __future__ import annotations

import pytest

from microcompact.config import Config
from microcompact.server.run import router_for
from microcompact.store import open_store


@pytest.mark.parametrize("flag", [None, True, False])
def test_router_sharing_follows_the_backend_unless_told(store_factory, flag) -> None:
    store = store_factory.open()
    router = router_for(Config(), store, flag)
    want = flag if flag is not None else store_factory.kind == "postgres"
    assert router.shared is want
    router.close()


def test_the_serve_command_offers_the_flag() -> None:
    from typer.testing import CliRunner

    from microcompact.cli import app

    out = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert out.exit_code == 0 and "--shared" in out.output and "--no-shared" in out.output


def test_shared_needs_a_store(tmp_path) -> None:
    with open_store(str(tmp_path / "s.db")) as store:
        assert router_for(Config(), store, True).shared
