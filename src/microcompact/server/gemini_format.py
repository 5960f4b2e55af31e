"""The Gemini API (``generateContent``): ``contents`` to session messages and back, without losing a part.

A request's history is ``contents``: Content objects with a ``role`` (``user`` or ``model``; none means
``user``) and ``parts``. One content becomes:

- model: one ``assistant`` message whose ``functionCall`` parts are ``tool_calls`` and whose visible text
  parts are its content (``thought: true`` parts and every other part stay on the client's content only);
- user: one ``tool`` message per ``functionResponse`` part, then one ``user`` message holding every other
  part (text, ``inlineData``, ``fileData``, unknown parts) when there is any.

Gemini calls carry no ids unless the client set ``id``: a call is named ``call-I-J`` (content I, its J-th
functionCall part) and a response is paired with a call of the model content right before it, by ``id``
when it has one, else the first open call of the same name, else the first open call. The ids are kept on
the history's copies under ``microcompact_calls`` (written here on every request, whatever the client sent
there; part of the identity digest, which they keep stable since they depend only on the contents before)
and removed before anything is forwarded. A request whose responses and calls do not pair is passed through
as it came (:meth:`GeminiFormat.passthrough_reason`): Gemini itself judges it.

Forwarding goes the other way from the client's own contents: a part is sent exactly as the client sent it
(``thoughtSignature`` included, byte for byte) unless the session dropped it (absorbed) or shortened it
(then only a functionCall's ``args``, a functionResponse's ``response`` or a text part's ``text`` change).
``systemInstruction``, ``tools``, ``toolConfig``, ``generationConfig`` and ``cachedContent`` are forwarded
untouched. The fold marker is a ``model`` content with one text part; next to another model content it is
merged into it as a separate part (parts are never concatenated, so no signature moves).

Thought signatures: what Google documents, and what this module does. Signatures may sit on any part; on
Gemini 3 models every ``functionCall`` part of the *current turn* (all steps since the last user content
with text) must carry the signature it came with (only the first call of a parallel step has one), else
400 "Function call is missing a thought_signature"; a signature must be returned on the part it came on,
never merged into or moved onto another part. Google documents no binding of a signature to the content
before it (unlike Anthropic's preserved thinking, whose blocks die with any change to the prefix): the
invalid-signature errors it names come from a change of model or key. So signatures are kept on every
part the session keeps, including after a fold, and none is stripped: a long tool loop is a single current
turn, and stripping after the first changed position would remove the very signatures whose absence Gemini
refuses. A functionCall the session rewrote keeps its signature (the step's), and one the proxy has to
write itself with no client original (a raw-forked call) gets the placeholder Google documents for calls
injected without one, ``skip_thought_signature_validator``. The marker's text part carries no signature:
text parts need none.
"""

from __future__ import annotations

import json
from typing import Any

from ..messages import Message
from ..render import content_text
from ..wire import Upstream, WireApi
from .errors import BadRequest
from .provider import dumps, history_array, identity_form, rewritten
from .usage_tap import gemini_cache_fields

# On the history's copies: the session ids of a content's calls or responses. Not a ``_`` key: the library
# drops those from client messages (a client may plant no metadata), and the ids must reach ``convert``.
CALLS_KEY = "microcompact_calls"
ROLES = ("user", "model")
# Google's documented placeholder for a functionCall part that has no signature of its own to return.
PLACEHOLDER_SIGNATURE = "skip_thought_signature_validator"
MAX_PART_DESCRIPTION = 80


def _parts(content: Message) -> list[Any]:
    parts = content.get("parts")
    return parts if isinstance(parts, list) else []


def _call(part: Any) -> dict[str, Any] | None:
    call = part.get("functionCall") if isinstance(part, dict) else None
    return call if isinstance(call, dict) else None


def _response(part: Any) -> dict[str, Any] | None:
    response = part.get("functionResponse") if isinstance(part, dict) else None
    return response if isinstance(response, dict) else None


def _visible_text(part: Any) -> str | None:
    if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
        return str(part["text"])
    return None


def _describe(part: Any) -> str:
    """A non-text part as the session's text: what it is, never its bytes (an image's base64)."""
    if not isinstance(part, dict):
        return ""
    text = _visible_text(part)
    if text is not None:
        return text
    if part.get("thought"):
        return ""
    for kind in ("inlineData", "fileData"):
        data = part.get(kind)
        if isinstance(data, dict):
            return f"[{kind} {data.get('mimeType') or data.get('fileUri') or ''}]".replace(" ]", "]")
    return f"[{','.join(sorted(map(str, part)))[:MAX_PART_DESCRIPTION]}]"


def _arguments(call: dict[str, Any]) -> str:
    return json.dumps(call.get("args", {}), ensure_ascii=False)


def _response_text(response: dict[str, Any]) -> str:
    """A functionResponse's ``response`` as the tool output the session holds (Gemini CLI sends
    ``{"output": "..."}``; anything else as JSON)."""
    body = response.get("response")
    if isinstance(body, dict) and set(body) == {"output"} and isinstance(body["output"], str):
        return str(body["output"])
    return json.dumps(body, ensure_ascii=False)


def _args(call: dict[str, Any]) -> Any:
    arguments = (call.get("function") or {}).get("arguments")
    try:
        return json.loads(arguments) if isinstance(arguments, str) else {}
    except ValueError:
        return {"arguments": arguments}


class _Pairing:
    """The session ids of every content's calls (model) or responses (user), and the first part that does
    not pair (a response answering no call of the content before it, a call left unanswered)."""

    def __init__(self, contents: list[Message]) -> None:
        self.ids: list[list[str]] = []
        self.problem: str | None = None
        open_calls: list[tuple[str, str]] = []  # (id, name) of the previous model content's unanswered calls
        for i, content in enumerate(contents):
            if content.get("role") == "model":
                if open_calls:
                    self._fail(f"contents.{i - 1}: functionCall {open_calls[0][1]!r} has no functionResponse")
                calls = [c for c in map(_call, _parts(content)) if c is not None]
                self.ids.append([str(c.get("id") or f"call-{i}-{j}") for j, c in enumerate(calls)])
                open_calls = [(self.ids[-1][j], str(c.get("name"))) for j, c in enumerate(calls)]
            else:
                self.ids.append(self._answer(i, content, open_calls))
                open_calls = []

    def _answer(self, i: int, content: Message, open_calls: list[tuple[str, str]]) -> list[str]:
        responses = [r for r in map(_response, _parts(content)) if r is not None]
        if open_calls and not responses:
            self._fail(f"contents.{i - 1}: functionCall {open_calls[0][1]!r} has no functionResponse")
        pending = list(open_calls)
        chosen: list[tuple[str, str] | None] = [None] * len(responses)
        rules = (lambda c, r: bool(r.get("id")) and c[0] == r.get("id"), lambda c, r: c[1] == r.get("name"))
        for rule in (*rules, lambda c, r: True):  # by id, then by name, then in order
            for k, response in enumerate(responses):
                if chosen[k] is None:
                    chosen[k] = next((c for c in pending if rule(c, response)), None)
                    if chosen[k] is not None:
                        pending.remove(chosen[k])  # type: ignore[arg-type]
        ids: list[str] = []
        for k, (response, pick) in enumerate(zip(responses, chosen, strict=True)):
            if pick is None:
                self._fail(f"contents.{i}: functionResponse {response.get('name')!r} answers no functionCall")
            ids.append(pick[0] if pick is not None else f"orphan-{i}-{k}")
        if responses and pending:
            self._fail(f"contents.{i - 1}: functionCall {pending[0][1]!r} has no functionResponse")
        return ids

    def _fail(self, problem: str) -> None:
        self.problem = self.problem or problem


class GeminiFormat:
    name: Upstream = Upstream.GEMINI
    wire: WireApi = WireApi.GEMINI
    binds_thinking: bool = False
    fixed_fields: tuple[str, ...] = ("tools", "systemInstruction")

    # ------------------------------------------------------------------ client -> session

    def history(self, body: Any) -> list[Message]:
        contents = history_array(body, "contents", "contents: must be an array of Content objects")
        for i, content in enumerate(contents):
            _check_content(content, f"contents.{i}")
        pairing = _Pairing(contents)
        return [{**content, CALLS_KEY: ids} for content, ids in zip(contents, pairing.ids, strict=True)]

    def passthrough_reason(self, body: dict[str, Any]) -> str | None:
        """``unpaired_function_parts`` when a functionResponse answers no call (or a call has no response):
        the session could not hold such a history whole, so it goes up as it came."""
        contents = body.get("contents")
        if not isinstance(contents, list) or _Pairing(contents).problem is None:
            return None
        return "unpaired_function_parts"

    def pairing_problem(self, body: dict[str, Any]) -> str | None:
        """What does not pair in ``body``'s contents (for the log line of a passthrough), or None."""
        contents = body.get("contents")
        return _Pairing(contents).problem if isinstance(contents, list) else None

    def convert(self, message: Message) -> list[Message]:
        parts, ids = _parts(message), message.get(CALLS_KEY) or []
        if message.get("role") == "model":
            calls = [c for c in map(_call, parts) if c is not None]
            text = "\n".join(t for t in map(_visible_text, parts) if t)
            converted: Message = {"role": "assistant", "content": text or None}
            if calls:
                converted["tool_calls"] = [
                    {
                        "id": ids[j] if j < len(ids) else f"call-{j}",
                        "type": "function",
                        "function": {"name": str(c.get("name", "")), "arguments": _arguments(c)},
                    }
                    for j, c in enumerate(calls)
                ]
            return [converted]
        responses = [r for r in map(_response, parts) if r is not None]
        out: list[Message] = [
            {
                "role": "tool",
                "tool_call_id": ids[k] if k < len(ids) else f"orphan-{k}",
                "name": str(r.get("name", "")),
                "content": _response_text(r),
            }
            for k, r in enumerate(responses)
        ]
        rest = [p for p in parts if _response(p) is None]
        if rest or not out:
            out.append({"role": "user", "content": "\n".join(d for d in map(_describe, rest) if d)})
        return out

    def part_count(self, message: Message) -> int:
        if message.get("role") == "model":
            return 1
        parts = _parts(message)
        responses = sum(1 for p in parts if _response(p) is not None)
        return responses + (1 if responses < len(parts) or not responses else 0)

    # ------------------------------------------------------------------ session -> client

    def rebuild(self, original: Message, parts: list[Message]) -> Message:
        if original.get("role") == "model":
            kept = _model_parts(original, parts[0]) if parts else _parts(original)
        else:
            kept = _user_parts(original, parts)
        return {**original, "parts": kept}  # still the client's (its pairing ids go when it is sent)

    def render(self, message: Message) -> Message:
        role, text = message.get("role"), content_text(message)
        if role == "assistant":
            parts: list[Any] = [{"text": text}] if text else []
            for call in message.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                parts.append({"functionCall": {"name": name, "args": _args(call)}})
            first_call = next((p for p in parts if "functionCall" in p), None)
            if first_call is not None:
                first_call["thoughtSignature"] = PLACEHOLDER_SIGNATURE
            return {"role": "model", "parts": parts or [{"text": ""}]}
        if role == "tool":
            response = {"name": message.get("name") or "", "response": {"output": text}}
            return {"role": "user", "parts": [{"functionResponse": response}]}
        return {"role": "user", "parts": [{"text": text}]}

    def normalize(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        """A content the proxy wrote (a marker) next to one of its role becomes a part of it; the client's
        own consecutive contents stay as it sent them."""
        merged: list[Message] = []
        for content in messages:
            rendered = CALLS_KEY not in content or CALLS_KEY not in merged[-1] if merged else False
            if rendered and (merged[-1].get("role") or "user") == (content.get("role") or "user"):
                merged[-1] = {**_plain(merged[-1]), "parts": _parts(merged[-1]) + _parts(content)}
            else:
                merged.append(content)
        return merged

    def view_problem(self, messages: list[Message]) -> str | None:
        """Every model content's functionCall parts answered, as many functionResponse parts, in the very
        next content (Gemini's rule), and no functionResponse without them."""
        calls = 0
        for i, content in enumerate(messages):
            parts = _parts(content)
            responses = sum(1 for p in parts if _response(p) is not None)
            if content.get("role") != "model" and responses != calls:
                return f"contents.{i}: {responses} functionResponse parts for {calls} functionCall parts before"
            if content.get("role") == "model" and calls:
                return f"contents.{i}: the {calls} functionCall parts before are not answered"
            calls = sum(1 for p in parts if _call(p) is not None) if content.get("role") == "model" else 0
        return None

    def key_material(self, body: dict[str, Any]) -> Any:
        """The first user content only: Gemini CLI's countTokens requests carry no systemInstruction, and
        they must find the conversation their generateContent requests hold."""
        contents = body.get("contents") or []
        first = next(
            (c for c in contents if isinstance(c, dict) and (c.get("role") or "user") == "user"),
            None,
        )
        return identity_form(_plain(first) if isinstance(first, dict) else first)

    def cache_fields(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return gemini_cache_fields(usage)

    def with_breakpoints(self, body: dict[str, Any], messages: list[Message]) -> list[Message]:
        return messages

    def prompt_tokens(self, response: Any) -> int | None:
        """``usageMetadata.promptTokenCount`` (which includes ``cachedContentTokenCount``): of a response,
        one SSE chunk, or the largest over a streamed JSON array (``streamGenerateContent`` without SSE)."""
        if isinstance(response, list):
            counts = [c for c in map(self.prompt_tokens, response) if c is not None]
            return max(counts) if counts else None
        usage = response.get("usageMetadata") if isinstance(response, dict) else None
        if not isinstance(usage, dict):
            return None
        for key in ("promptTokenCount", "cachedContentTokenCount"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def body(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        """The outgoing body: the client's, with ``messages`` as its ``contents``."""
        return dumps({**body, "contents": [_plain(m) for m in messages]})


def _check_content(content: Any, where: str) -> None:
    if not isinstance(content, dict):
        raise BadRequest(f"{where}: must be a Content object")
    role = content.get("role")
    if role is not None and role not in ROLES:
        raise BadRequest(f"{where}.role: unknown role {role!r} (expected 'user' or 'model')")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise BadRequest(f"{where}.parts: must be an array of Part objects")
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise BadRequest(f"{where}.parts.{j}: must be a Part object")
        if "text" in part and not isinstance(part["text"], str):
            raise BadRequest(f"{where}.parts.{j}.text: must be a string")
        for kind in ("functionCall", "functionResponse"):
            if kind in part and not (isinstance(part[kind], dict) and isinstance(part[kind].get("name"), str)):
                raise BadRequest(f"{where}.parts.{j}.{kind}: must be an object with a string 'name'")
        if "functionCall" in part and role != "model":
            raise BadRequest(f"{where}.parts.{j}: a functionCall part belongs to a 'model' content")


def _plain(content: Message) -> Message:
    """``content`` without the proxy's pairing ids."""
    return {k: v for k, v in content.items() if k != CALLS_KEY} if CALLS_KEY in content else content


def _user_parts(original: Message, parts: list[Message]) -> list[Any]:
    """The original user content's parts that ``parts`` kept: responses by id (a shortened one with its new
    output), the other parts when the user message survived."""
    ids = iter(original.get(CALLS_KEY) or [])
    results = {p.get("tool_call_id"): p for p in parts if p.get("role") == "tool"}
    user_kept = any(p.get("role") == "user" for p in parts)
    kept: list[Any] = []
    for part in _parts(original):
        response = _response(part)
        if response is None:
            if user_kept:
                kept.append(part)
            continue
        result = results.get(next(ids, None))
        if result is None:
            continue
        if rewritten(result):
            part = {**part, "functionResponse": {**response, "response": {"output": content_text(result)}}}
        kept.append(part)
    return kept


def _model_parts(original: Message, part: Message) -> list[Any]:
    """The original model parts with what the session shortened: call ``args`` (shortened arguments), the
    visible text (a cut). Thought parts and every signature stay as they came."""
    if not rewritten(part):
        return _parts(original)
    ids = iter(original.get(CALLS_KEY) or [])
    calls = {c.get("id"): c for c in part.get("tool_calls") or []}
    text = content_text(part)
    kept: list[Any] = []
    text_placed = False
    for item in _parts(original):
        call = _call(item)
        if call is not None:
            shortened = calls.get(next(ids, None))
            kept.append({**item, "functionCall": {**call, "args": _args(shortened)}} if shortened else item)
        elif _visible_text(item) is not None:
            if not text_placed and text:
                kept.append({**item, "text": text})
            text_placed = True
        else:
            kept.append(item)
    return kept
