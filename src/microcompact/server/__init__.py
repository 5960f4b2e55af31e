"""``microcompact serve``: a proxy that puts compaction in front of any OpenAI or Anthropic client.

Clients resend their full history on every request; the proxy routes it to the session it continues,
forwards the compacted view and streams the answer back untouched. See :mod:`.app` for the routes.
"""

from .app import Proxy, ProxySettings, create_app

__all__ = ["Proxy", "ProxySettings", "create_app"]
