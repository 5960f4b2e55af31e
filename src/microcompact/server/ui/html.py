"""HTML made by string building, every value escaped on the way in: transcripts are hostile input (script
tags, very long lines, control characters all render as text). The style and the one script are inline,
under the response's CSP nonce; nothing loads from outside the package."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterable
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#20252c;color:#fff;padding:10px 18px}header a{color:#9cd0ff}
main{padding:12px 18px;max-width:1200px}h1{font-size:18px;margin:0}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border:1px solid #d9dde3;padding:3px 6px;
text-align:right;vertical-align:top}th{background:#eceff3}td.l,th.l{text-align:left}
td.id{max-width:28em;overflow-wrap:anywhere;text-align:left}th.id{text-align:left}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #d9dde3;padding:8px;
max-height:32em;overflow:auto;margin:4px 0}
details{background:#fff;border:1px solid #d9dde3;margin:4px 0;padding:4px 8px}summary{cursor:pointer;
overflow-wrap:anywhere}svg{background:#fff;border:1px solid #d9dde3}.pt{fill:#2f6fb3}.pt.fold{fill:#d0453a}
.line{fill:none;stroke:#2f6fb3;stroke-width:1.5}.cap{stroke:#d0453a;stroke-dasharray:4 3}
.axis{stroke:#888}.lbl{font-size:11px;fill:#555}.muted{color:#666}.fold-row{background:#fff1ef}
form{margin:6px 0}input[type=search]{width:24em;padding:3px}
"""

# Polls the page's JSON; when its figures moved, fetches the page again and swaps the live part in
# (parsed as a document: no script in it runs, and the text was escaped by the server). The audit's switch
# button posts JSON (which no cross-site form can send) to /ui/api/rewrite.
SCRIPT = """
document.addEventListener('click',function(e){var t=e.target,id=t&&t.getAttribute&&t.getAttribute('data-rewrite-id');
if(!id)return;fetch('/ui/api/rewrite',{method:'POST',credentials:'same-origin',headers:{'content-type':
'application/json'},body:JSON.stringify({id:id,rewrite:t.getAttribute('data-rewrite')==='on'})}).then(function(){
location.reload()})});
(function(){var b=document.body,u=b.getAttribute('data-poll'),last=b.getAttribute('data-sig');
if(!u)return;function sig(j){return JSON.stringify(j.signature)}
setInterval(function(){fetch(u,{credentials:'same-origin'}).then(function(r){return r.json()}).then(function(j){
var s=sig(j);if(s===last)return;last=s;return fetch(location.href,{credentials:'same-origin'}).then(function(r){
return r.text()}).then(function(t){var d=new DOMParser().parseFromString(t,'text/html');
var n=d.getElementById('live'),o=document.getElementById('live');if(n&&o)o.replaceWith(document.importNode(n,true))})
}).catch(function(){})},3000)})();
"""


def esc(value: Any) -> str:
    """``value`` as HTML text: control characters shown as ``\\xNN``, lone surrogates as ``?``, markup
    characters escaped."""
    text = "" if value is None else str(value)
    if not text.isascii():  # a lone surrogate cannot be sent as UTF-8: shown as "?"
        text = text.encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return html.escape(text, quote=True)


def page(title: str, body: str, nonce: str, poll: str = "", signature: str = "") -> str:
    """A whole document: ``body`` is HTML built here (escaped); ``poll`` the JSON the script watches."""
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no /favicon.ico request, which the proxy would refuse and log
        f"<title>{esc(title)}</title><style nonce={esc(nonce)}>{STYLE}</style></head>"
        f'<body data-poll="{esc(poll)}" data-sig="{esc(signature)}">'
        f'<header><h1><a href="/ui">microcompact</a> &middot; {esc(title)}</h1></header>'
        f"<main>{body}</main><script nonce={esc(nonce)}>{SCRIPT}</script></body></html>"
    )


def table(headers: Iterable[tuple[str, str]], rows: Iterable[tuple[str, list[str]]]) -> str:
    """A table of already-escaped cells; ``headers`` as (label, css class), ``rows`` as (row class, cells)."""
    heads = list(headers)
    head = "".join(f'<th class="{c}">{esc(label)}</th>' for label, c in heads)
    body = "".join(
        f'<tr class="{cls}">'
        + "".join(f'<td class="{c}">{cell}</td>' for (_, c), cell in zip(heads, cells, strict=True))
        + "</tr>"
        for cls, cells in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "&ndash;"


def pct(value: Any) -> str:
    return f"{value:.1f}%" if isinstance(value, int | float) and not isinstance(value, bool) else "&ndash;"


def dollars(value: Any) -> str:
    return f"${value:,.4f}" if isinstance(value, int | float) and not isinstance(value, bool) else "&ndash;"


def when(at: Any) -> str:
    if not isinstance(at, int | float):
        return "&ndash;"
    return esc(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)))
