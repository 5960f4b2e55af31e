"""One TLS context per environment: every app and doctor check of a process shares it, and a process whose
``SSL_CERT_FILE`` names another bundle gets a context of its own, built from that bundle."""

from __future__ import annotations

import ssl

import certifi
import pytest

from microcompact.server.upstream_send import tls_context


def test_the_context_is_built_once_per_certificate_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = tls_context()
    assert isinstance(default, ssl.SSLContext) and default.verify_mode is ssl.CERT_REQUIRED
    assert tls_context() is default
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    own = tls_context()
    assert own is not default and tls_context() is own
    assert own.verify_mode is ssl.CERT_REQUIRED and own.cert_store_stats()["x509_ca"] > 0
    monkeypatch.delenv("SSL_CERT_FILE")
    assert tls_context() is default
