"""The conversation page ``serve`` answers at ``/ui`` (issue 28): what the proxy did to each conversation,
read from the store, as HTML (no asset from outside the package, a strict CSP) and as JSON.

    record  the per-request figures, written in each request's follow-up (server/compaction.py)
    data    the page's figures read from the store, as JSON-ready dicts
    access  the proxy key as a header or a one-time ``?key=`` login cookie; the security headers
    html    escaping, the document frame, the inline style and polling script
    pages   the list page and the conversation page (chart, passes, markers, requests, search)
    api     the routes, HTML and JSON
    switch  serve --audit's switch of one conversation to rewriting (POST /ui/api/rewrite)
"""

from __future__ import annotations

from .api import ConversationPages

__all__ = ["ConversationPages"]
