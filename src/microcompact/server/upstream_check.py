"""``microcompact doctor``: what would go wrong before a client finds out, one finding per check.

Each upstream is asked for its model list with the key the environment gives it (the cheapest request
every provider answers, and one that proves the key): 200 is fine, 401/403 a refused key, and a 404 is
checked again with the path the user most likely meant (an OpenAI base URL without ``/v1``, an Anthropic
one with it), so the finding names the fix. An upstream on this machine at the port ``serve`` will listen
on, or one that answers like a microcompact proxy, is a loop (:mod:`.hops` refuses it at request time
too). A summarizer endpoint whose key variable is not set is flagged, since its first fold would fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

import httpx

from ..config import Config, SummarizerKind
from .upstream_send import tls_context

OPENAI_KEY_ENV = "OPENAI_API_KEY"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
GEMINI_KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})
PROXY_MARK = "x-microcompact-mode"  # every answer of a microcompact proxy carries it


class Status(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str


@dataclass(frozen=True)
class Upstream:
    """One provider's side of the check: its base URL, the models path under it, the headers its key goes
    in, and the URL a 404 is tried again with (what the user most likely meant), with the fix to name."""

    name: str
    option: str
    base: str
    models_path: str
    key_env: tuple[str, ...]
    headers: Callable[[str], dict[str, str]]
    retry: Callable[[str], tuple[str, str] | None]


def _openai_retry(base: str) -> tuple[str, str] | None:
    if base.rstrip("/").endswith("/v1"):
        return None
    fixed = base.rstrip("/") + "/v1"
    return fixed, f"--openai-upstream lacks /v1: use {fixed}"


def _anthropic_retry(base: str) -> tuple[str, str] | None:
    if not base.rstrip("/").endswith("/v1"):
        return None
    fixed = base.rstrip("/").removesuffix("/v1")
    return fixed, f"--anthropic-upstream ends in /v1, which the proxy adds itself: use {fixed}"


def upstreams(openai: str, anthropic: str, gemini: str) -> list[Upstream]:
    return [
        Upstream(
            "OpenAI",
            "--openai-upstream",
            openai,
            "/models",
            (OPENAI_KEY_ENV,),
            lambda key: {"authorization": f"Bearer {key}"},
            _openai_retry,
        ),
        Upstream(
            "Anthropic",
            "--anthropic-upstream",
            anthropic,
            "/v1/models",
            (ANTHROPIC_KEY_ENV,),
            lambda key: {"x-api-key": key, "anthropic-version": "2023-06-01"},
            _anthropic_retry,
        ),
        Upstream(
            "Gemini",
            "--gemini-upstream",
            gemini,
            "/v1beta/models",
            GEMINI_KEY_ENVS,
            lambda key: {"x-goog-api-key": key},
            lambda base: None,
        ),
    ]


def _loop(upstream: Upstream, port: int | None) -> Finding | None:
    parts = urlsplit(upstream.base)
    default = 443 if parts.scheme == "https" else 80
    if port is not None and parts.hostname in LOOPBACK and (parts.port or default) == port:
        return Finding(
            upstream.name,
            Status.FAILED,
            f"{upstream.option} {upstream.base} is this proxy's own address (port {port}): a loop; "
            "give the provider's URL",
        )
    return None


def check_upstream(upstream: Upstream, env: Mapping[str, str], port: int | None, timeout: float) -> Finding:
    """One upstream, as its clients will reach it through the proxy; without a key in the environment the
    model list is asked for all the same (a 401 then says the URL is right)."""
    looped = _loop(upstream, port)
    if looped is not None:
        return looped
    key = next((env[name] for name in upstream.key_env if env.get(name)), None)
    try:
        answer = _models(upstream, upstream.base, key, timeout)
    except httpx.HTTPError as exc:
        unreachable = f"{upstream.option} {upstream.base}: unreachable ({type(exc).__name__})"
        return Finding(upstream.name, Status.FAILED, unreachable)
    if PROXY_MARK in answer.headers:
        return Finding(
            upstream.name,
            Status.FAILED,
            f"{upstream.option} {upstream.base} answers as a microcompact proxy: point it at the provider",
        )
    return _verdict(upstream, key, answer, timeout)


def _models(upstream: Upstream, base: str, key: str | None, timeout: float) -> httpx.Response:
    headers = upstream.headers(key) if key is not None else {}
    url = base.rstrip("/") + upstream.models_path
    return httpx.get(url, headers=headers, timeout=timeout, verify=tls_context())


def _verdict(upstream: Upstream, key: str | None, answer: httpx.Response, timeout: float) -> Finding:
    where = f"{upstream.option} {upstream.base}"
    if answer.status_code == 404:
        return _not_found(upstream, key, timeout)
    if key is None:
        names = " or ".join(upstream.key_env)
        return Finding(upstream.name, Status.SKIPPED, f"{where} answers; no {names} in the environment to check")
    if answer.status_code == 200:
        return Finding(upstream.name, Status.OK, f"{where}: the key is accepted")
    if answer.status_code in (401, 403):
        return Finding(upstream.name, Status.FAILED, f"{where}: the key was refused ({answer.status_code})")
    return Finding(upstream.name, Status.FAILED, f"{where}: answered {answer.status_code}")


def _not_found(upstream: Upstream, key: str | None, timeout: float) -> Finding:
    """A 404 for the model list: the base URL is wrong; when the likely one answers, name it."""
    retry = upstream.retry(upstream.base)
    if retry is not None:
        fixed, fix = retry
        try:
            again: httpx.Response | None = _models(upstream, fixed, key, timeout)
        except httpx.HTTPError:
            again = None
        if again is not None and again.status_code != 404:
            return Finding(upstream.name, Status.FAILED, fix)
    where = f"{upstream.option} {upstream.base}"
    return Finding(upstream.name, Status.FAILED, f"{where}: no model list there (404); is the base URL right?")


def check_summarizer(config: Config, env: Mapping[str, str]) -> Finding:
    """A summarizer endpoint needs its key variable set (a local model may take none: then a warning)."""
    aux = config.auxiliary.compression
    if aux.kind is not SummarizerKind.ENDPOINT:
        return Finding("summarizer", Status.OK, f"{aux.kind}: no key needed")
    if env.get(aux.api_key_env):
        return Finding("summarizer", Status.OK, f"{aux.provider} at {aux.base_url or 'its default URL'}: key set")
    if aux.local:
        return Finding(
            "summarizer",
            Status.SKIPPED,
            f"{aux.api_key_env} is not set; a local endpoint ({aux.base_url}) may need none",
        )
    return Finding(
        "summarizer",
        Status.FAILED,
        f"auxiliary.compression.api_key_env names {aux.api_key_env}, which is not set: every model summary would fail",
    )


def run_checks(
    config: Config,
    openai: str,
    anthropic: str,
    gemini: str,
    *,
    port: int | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> list[Finding]:
    """Every finding, summarizer first."""
    env = os.environ if env is None else env
    found = [check_summarizer(config, env)]
    found += [check_upstream(u, env, port, timeout) for u in upstreams(openai, anthropic, gemini)]
    return found


__all__ = ["Finding", "Status", "check_summarizer", "check_upstream", "run_checks", "upstreams"]
