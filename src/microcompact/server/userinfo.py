"""URLs as the proxy prints them: without userinfo. ``--openai-upstream http://user:pw@host/v1`` sends the
credentials upstream (httpx turns them into Basic auth) but never prints them: not in the startup line, an
error, or any log line (:class:`HideUserinfo` sits on the log handlers while ``serve`` runs)."""

from __future__ import annotations

import logging
import re

# scheme://userinfo@ ; the userinfo runs to the last "@" before the host (a password may hold a raw "@").
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#\"'<>]*@")
WATCHED_LOGGERS = ("", "microcompact", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "asyncio")


def without_userinfo(text: str) -> str:
    """``text`` with the userinfo of every URL in it removed (``http://u:p@h/v1`` -> ``http://h/v1``)."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text


class HideUserinfo(logging.Filter):
    """Rewrites a record's message (and its formatted traceback) without URL userinfo."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "@" in message:
            record.msg, record.args = without_userinfo(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and "@" in record.exc_text:
            record.exc_text = without_userinfo(record.exc_text)
        return True


def hide_userinfo_in_logs() -> HideUserinfo:
    """Put one :class:`HideUserinfo` on every handler of the loggers a ``serve`` process writes through (and
    on logging's last-resort stderr handler); the filter, for :func:`stop_hiding`."""
    hider = HideUserinfo()
    for handler in _handlers():
        handler.addFilter(hider)
    return hider


def stop_hiding(hider: HideUserinfo) -> None:
    for handler in _handlers():
        handler.removeFilter(hider)


def _handlers() -> list[logging.Handler]:
    found: list[logging.Handler] = [logging.lastResort] if logging.lastResort is not None else []
    for name in WATCHED_LOGGERS:
        found += [h for h in logging.getLogger(name).handlers if h not in found]
    return found


__all__ = ["HideUserinfo", "hide_userinfo_in_logs", "stop_hiding", "without_userinfo"]
