"""The long runs the commands start (a replay, a comparison), by name.

``replay_command`` and ``compare_command`` call them as ``runs.replay`` and ``runs.compare``, looked up per
call, so a test stands in for one by setting it here; a module of its own below both commands, so neither
has to reach back into the package that assembles them.
"""

from __future__ import annotations

from ..replay import replay
from ..replay.compare import compare

__all__ = ["compare", "replay"]
