"""Summary fidelity: what our marker and compacted view still name, beside Claude Code's own summary.

Run: ``PYTHONPATH=src .venv/bin/python bench/fidelity.py`` (extractive default), or with a model behind
an OpenAI-compatible endpoint: ``--summarizer openai --base-url http://127.0.0.1:8080/v1 --model NAME``.
``--sessions`` picks other transcripts (a session without a recorded compaction is replayed whole and
has no Claude Code row); ``--window`` sets ``model.context_length``. Prints a table; asserts nothing.

Method: each shared Claude Code session is replayed (micro-compaction on, default config) up to the
message where Claude Code compacted (``compact_summary_indices`` in its ``.meta.json``). Then, for

* **marker**: the text of every marker in the view, against the messages those markers absorbed;
* **view**: the whole compacted view (markers and the verbatim messages), against every message so far;
* **claude**: Claude Code's own summary message at that index, against every message so far;

it counts, each as found/total:

* **edited**: files a successful edit, write or create call touched, named by path or basename;
* **read**: files only read (never edited), named by path or basename;
* **failing**: shell commands that failed (non-zero exit or a tool error), named (the first 30 characters
  of the command) together with one of their error lines (its first 40 characters);
* **users**: user messages found verbatim, whitespace folded (markers never hold them: the view keeps them
  as they were);
* **tokens**: of the text compared (o200k_base).

The ground truth is read from the tool calls with plain rules of this file, independent of the
summarizer's own fact extraction.
"""

from __future__ import annotations

import argparse
import json
import logging
import posixpath
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcompact.config import Config, ConfigError, load_config
from microcompact.messages import Message, content_text, is_marker, marker_body
from microcompact.render import message_text
from microcompact.replay import load_transcript, replay
from microcompact.session import Session

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ("cc_fa812bfe", "cc_4d5611e5", "cc_ae4a77f8")
EDIT_TOOLS = {"edit", "multiedit", "write", "notebookedit", "create", "insert"}
READ_TOOLS = {"read", "open", "view"}
EDITOR_EDITS = {"create", "str_replace", "insert"}
PATH_KEYS = ("file_path", "path", "notebook_path", "filename")
EXIT = re.compile(r"^\s*Exit code (-?\d+)|<exit_code>(-?\d+)</exit_code>")
ERRORISH = re.compile(
    r"(?i)error|fatal|fail|denied|not found|no such|exception|invalid|cannot|can't|unknown|missing|warning|found \d"
)
COMMAND_PREFIX = 30
ERROR_PREFIX = 40


def normalized_dir() -> Path:
    """The shared transcripts, found the way the tests find them (tests/support/paths.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.paths import NORMALIZED

    return NORMALIZED


@dataclass
class Truth:
    """What a run of messages did: edited and read files, failing commands, user messages."""

    edited: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)
    failing: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, candidate error lines)
    users: list[str] = field(default_factory=list)

    @property
    def read_only(self) -> set[str]:
        return self.read - self.edited


def ground_truth(messages: Iterable[tuple[int, Message]], wanted: set[int] | None = None) -> Truth:
    """The facts of the messages whose index is in ``wanted`` (all when None); tool calls are paired with
    results across the whole list, and SWE-agent's path-less edits go to the file it opened last."""
    truth = Truth()
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    open_file: str | None = None
    for i, m in messages:
        role = m.get("role")
        if role == "user" and (wanted is None or i in wanted):
            truth.users.append(content_text(m).strip())
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            calls[str(call.get("id"))] = (str(fn.get("name") or ""), args if isinstance(args, dict) else {})
        if role != "tool" or str(m.get("tool_call_id")) not in calls:
            continue
        name, args = calls[str(m.get("tool_call_id"))]
        result = content_text(m)
        path = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k]), None)
        if name.lower() in ("open", "create") and path:
            open_file = path
        if path is None and name.lower() in ("edit", "insert"):
            path = open_file
        if wanted is not None and i not in wanted:
            continue
        failed = result.lstrip().startswith(("<tool_use_error>", "Error"))
        code = EXIT.search(result)
        if code and int(code.group(1) or code.group(2)) != 0:
            failed = True
        command = args.get("command") if name.lower() in ("bash", "shell", "run_shell", "execute_bash") else None
        if isinstance(command, str) and failed:
            lines = [ln.strip() for ln in result.splitlines() if ln.strip() and not EXIT.search(ln)]
            truth.failing.append((command, [ln for ln in lines if ERRORISH.search(ln)] or lines[:3]))
        if failed or not path:
            continue
        editor = args.get("command") if name == "str_replace_editor" else None
        if name.lower() in EDIT_TOOLS or editor in EDITOR_EDITS:
            truth.edited.add(path)
        elif name.lower() in READ_TOOLS or editor == "view":
            truth.read.add(path)
    return truth


def named(path: str, text: str) -> bool:
    """The path, or its file name as a whole word, appears in ``text``."""
    base = posixpath.basename(path.rstrip("/"))
    return path in text or re.search(rf"(?<![\w-]){re.escape(base)}(?![\w-])", text) is not None


def canonical(text: str) -> str:
    return " ".join(text.replace("`", "'").split())


def failing_named(command: str, error_lines: list[str], text: str) -> bool:
    flat = canonical(text)
    head = canonical(command.splitlines()[0] if command.strip() else command)[:COMMAND_PREFIX]
    return head in flat and any(canonical(line)[:ERROR_PREFIX] in flat for line in error_lines)


def score(truth: Truth, text: str, tokens: int, users_in: str | None) -> dict[str, Any]:
    """How much of ``truth`` ``text`` names; user messages are looked for (whitespace folded) in ``users_in``."""

    def frac(found: int, total: int) -> list[int]:
        return [found, total]

    return {
        "tokens": tokens,
        "edited": frac(sum(named(p, text) for p in truth.edited), len(truth.edited)),
        "read": frac(sum(named(p, text) for p in truth.read_only), len(truth.read_only)),
        "failing": frac(sum(failing_named(c, e, text) for c, e in truth.failing), len(truth.failing)),
        "users": frac(sum(canonical(u) in users_in for u in truth.users), len(truth.users)) if users_in else None,
    }


def make_config(args: argparse.Namespace) -> Config:
    sections: dict[str, Any] = {"compression": {"micro_compact": True}, "model": {"context_length": args.window}}
    if args.summarizer == "openai":
        aux: dict[str, Any] = {"provider": "openai", "model": args.model, "base_url": args.base_url}
        if args.api_key_env:
            aux["api_key_env"] = args.api_key_env
        if args.timeout:
            aux["timeout"] = args.timeout
        sections["auxiliary"] = {"compression": aux}
    base = load_config(args.config) if args.config else Config()
    return base.with_overrides(source="bench/fidelity.py options", **sections)


def run_one(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Replay ``path`` up to its compaction point and score marker, view and Claude Code's summary."""
    meta_path = path.with_suffix(".meta.json")
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    messages = load_transcript(path)
    points = meta.get("compact_summary_indices") or []
    end = points[0] if points else len(messages)
    prefix = [{**m, "_src": i} for i, m in enumerate(messages[:end])]
    session = Session(make_config(args))
    stats = replay(prefix, session)
    view = session.ledger.messages
    kept = {m["_src"] for m in view if isinstance(m.get("_src"), int) and not is_marker(m)}
    absorbed = {i for i in range(end) if i not in kept and prefix[i].get("role") != "user"}
    markers = "\n\n".join(marker_body(m) for m in view if is_marker(m))
    view_text = "\n\n".join(message_text(m, tool_calls=True) for m in view)
    view_users = "\n\n".join(canonical(content_text(m)) for m in view if m.get("role") == "user")
    count = session.counter.count_text
    indexed = list(enumerate(messages[:end]))
    everything = ground_truth(indexed)
    row: dict[str, Any] = {
        "session": path.stem,
        "messages": end,
        "absorbed": len(absorbed),
        "markers": sum(1 for m in view if is_marker(m)),
        "passes": sum(stats.outcomes.values()),
        "outcomes": {str(k): v for k, v in stats.outcomes.items()},
        "marker": score(ground_truth(indexed, absorbed), markers, count(markers), None),
        "view": score(everything, view_text, session.tokens, view_users),
    }
    if points:
        cc = content_text(messages[end])
        row["claude"] = score(everything, cc, count(cc), canonical(cc))
    return row


def pct(pair: list[int] | None) -> str:
    if pair is None:
        return "-"
    found, total = pair
    return f"{found}/{total} ({100 * found / total:.0f}%)" if total else "0/0"


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| session | text | tokens | edited named | read-only named | failing cmds + error line | users verbatim |")
    print("|---|---|---:|---:|---:|---:|---:|")
    totals: dict[str, dict[str, Any]] = {}
    for r in rows:
        for kind in ("marker", "view", "claude"):
            s = r.get(kind)
            if s is None:
                continue
            label = f"{kind} ({r['absorbed']} msgs absorbed)" if kind == "marker" else kind
            print(
                f"| {r['session']} | {label} | {s['tokens']:,} | {pct(s['edited'])} | {pct(s['read'])} "
                f"| {pct(s['failing'])} | {pct(s['users'])} |"
            )
            t = totals.setdefault(kind, {"tokens": [], "edited": [0, 0], "read": [0, 0], "failing": [0, 0]})
            t["tokens"].append(s["tokens"])
            for key in ("edited", "read", "failing"):
                t[key] = [t[key][0] + s[key][0], t[key][1] + s[key][1]]
    for kind, t in totals.items():
        span = f"{min(t['tokens']):,}-{max(t['tokens']):,}"
        print(f"| all | {kind} | {span} | {pct(t['edited'])} | {pct(t['read'])} | {pct(t['failing'])} | |")
    print()
    for r in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        print(f"{r['session']}: {r['messages']} messages replayed, {r['markers']} marker(s); micro passes: {outcomes}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default=",".join(SESSIONS), help="normalized transcript names, comma-separated")
    parser.add_argument("--window", type=int, default=200_000, help="model.context_length (default 200000)")
    parser.add_argument("--summarizer", choices=("extractive", "openai"), default="extractive")
    parser.add_argument("--base-url", help="the OpenAI-compatible endpoint (with --summarizer openai)")
    parser.add_argument("--model", help="the model name the endpoint serves (with --summarizer openai)")
    parser.add_argument("--api-key-env", help="environment variable holding the endpoint's key")
    parser.add_argument("--timeout", type=float, help="seconds per summarizer request")
    parser.add_argument("--config", type=Path, help="a config file under these options (e.g. configs/local-model.yaml)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.config:
        try:
            load_config(args.config)
        except ConfigError as exc:
            print(f"fidelity: {exc}", file=sys.stderr)
            return 2
    if args.summarizer == "openai" and not args.model:
        parser.error("--summarizer openai needs --model (and usually --base-url)")
    logging.disable(logging.WARNING)
    folder = normalized_dir()
    paths = [folder / f"{name.strip()}.jsonl" for name in args.sessions.split(",") if name.strip()]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"fidelity: no such transcript: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = [run_one(p, args) for p in paths]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
