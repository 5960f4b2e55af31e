"""Run the scripted upstream as its own process (for benchmarks and manual runs with real agents).

    PYTHONPATH=tests python -m upstream [--port 0] [--tool-loop N | --replay FILE] [--latency S] ...

It prints ``listening on http://127.0.0.1:PORT`` once it is ready, then serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .recorded import Script
from .replay import TranscriptReplay, load_transcript
from .scripts import ToolLoop
from .server import ScriptedUpstream
from .usage import DEFAULT_OVERHEAD


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m upstream", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--tool-loop", type=int, metavar="N", help="call Bash until N tool results, then finish")
    parser.add_argument("--thinking", action="store_true", help="with --tool-loop: signed thinking blocks too")
    parser.add_argument("--replay", metavar="FILE", help="serve a normalized transcript's assistant messages")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the response headers")
    parser.add_argument("--event-delay", type=float, default=0.0, help="seconds between SSE events")
    parser.add_argument("--overhead", type=int, default=DEFAULT_OVERHEAD, help="tokens added to every prompt")
    parser.add_argument("--gzip-json", action="store_true", help="gzip JSON bodies for clients that accept it")
    args = parser.parse_args(argv)
    if args.tool_loop is not None and args.replay:
        parser.error("--tool-loop and --replay are exclusive")

    script: Script | None = None
    if args.tool_loop is not None:
        script = ToolLoop(args.tool_loop, thinking=args.thinking)
    elif args.replay:
        try:
            script = TranscriptReplay(load_transcript(args.replay))
        except (OSError, ValueError) as exc:
            print(f"upstream: cannot read transcript {args.replay}: {exc}", file=sys.stderr)
            return 2

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    upstream = ScriptedUpstream(
        script,
        port=args.port,
        latency=args.latency,
        event_delay=args.event_delay,
        overhead=args.overhead,
        gzip_json=args.gzip_json,
    )
    with upstream:
        print(f"listening on {upstream.base_url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
