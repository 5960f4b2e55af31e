"""CPU time of redaction over the recorded transcripts, without and with a session's secret memory.

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_redact.py``. Prints figures; asserts nothing.

Every content string and tool-call argument string of the shared corpus (``/work/shared/transcripts``, or
``tests/data`` transcripts when it is absent) is redacted once per round; the best of ``--rounds`` is
reported, in process CPU time (the machine's other load counts less than in wall time). With a memory, it
is taught ``--values`` generated secrets of assorted shapes first (none of them in the corpus), so every
text is scanned for candidates by every shape and nothing matches: the cost a session pays for what it
remembers. Run it on two checkouts to compare (``PYTHONPATH=<other>/src``).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
from pathlib import Path

from microcompact import redact

CORPORA = [Path("/work/shared/transcripts/normalized"), Path(__file__).resolve().parents[1] / "tests" / "data"]


def corpus_texts() -> list[str]:
    texts: list[str] = []
    for folder in CORPORA:
        for path in sorted(folder.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                content = message.get("content")
                if isinstance(content, str):
                    texts.append(content)
                for call in message.get("tool_calls") or []:
                    args = call.get("function", {}).get("arguments") if isinstance(call, dict) else None
                    texts.append(args if isinstance(args, str) else json.dumps(args))
        if texts:
            return texts
    return texts


def generated_secrets(count: int, seed: int = 7) -> list[str]:
    """Assignments whose values have assorted lengths and symbol sets (as real passwords and keys do)."""
    r = random.Random(seed)
    symbols = ["", "/", "+/", "-", "_", "&", "!", ".-"]
    out = []
    for i in range(count):
        alphabet = string.ascii_letters + string.digits + symbols[i % len(symbols)]
        value = "".join(r.choice(alphabet) for _ in range(r.randint(10, 48)))
        out.append(f'api_key = "Zq9{value}"')
    return out


def best_cpu(texts: list[str], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for text in texts:
            redact.redact_text(text)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--values", type=int, default=50, help="secrets the memory is taught (default 50)")
    args = ap.parse_args()
    texts = corpus_texts()
    size = sum(len(t) for t in texts)
    print(f"corpus: {len(texts)} texts, {size / 1e6:.2f} MB")
    plain = best_cpu(texts, args.rounds)
    print(f"redact_text, no memory        : {plain * 1000:8.1f} ms CPU ({size / plain / 1e6:.1f} MB/s)")
    remembering = getattr(redact, "remembering", None)
    if remembering is None:
        print("(this checkout has no secret memory)")
        return
    from microcompact.redact.secret_memory import SecretMemory

    for values in (0, 6, args.values):
        memory = SecretMemory()
        with remembering(memory):
            for secret in generated_secrets(values):
                redact.redact_text(secret)
        shapes = len(memory.export()["shapes"])
        with remembering(memory):
            cost = best_cpu(texts, args.rounds)
        print(
            f"redact_text, memory of {values:3d} values ({shapes:3d} shapes): {cost * 1000:8.1f} ms CPU "
            f"({(cost / plain - 1) * 100:+.0f}% vs no memory)"
        )


if __name__ == "__main__":
    main()
