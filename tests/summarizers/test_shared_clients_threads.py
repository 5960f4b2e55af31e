"""The summarizers' shared SDK clients under threads: a proxy opens sessions for several conversations (and
several credentials) at once, and each session's summarizer asks for its endpoint's client."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from microcompact.summarizers.http import shared_client


def test_threads_asking_at_once_get_one_client_per_credential_and_never_anothers() -> None:
    url = f"http://127.0.0.1:9/{uuid.uuid4().hex}/v1"  # an endpoint no other test shares
    credentials = ("cred-alice-0123", "cred-bob-4567")
    start = threading.Barrier(16)
    got: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def ask(credential: str) -> None:
        start.wait()
        for _ in range(50):
            client = shared_client(credential, url, 30.0)
            with lock:
                got.append((credential, client))

    threads = [threading.Thread(target=ask, args=(credentials[i % 2],)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 16 * 50
    by_credential = {c: {id(client) for cred, client in got if cred == c} for c in credentials}
    assert all(len(ids) == 1 for ids in by_credential.values()), "one client per credential, made once"
    assert by_credential[credentials[0]] != by_credential[credentials[1]]
    for credential, client in got:
        assert client.api_key == credential  # a conversation's key never rides another's client
