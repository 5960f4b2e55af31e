"""Every key the library writes beside what a message says, and every key it writes to a stored session's meta.

A message's own keys (``role``, ``content``, ``tool_calls``...) belong to the caller and the provider; the
library's bookkeeping travels on the same dict under keys that start with an underscore, so ``to_api`` can
strip all of it with one rule and no provider ever sees it. Each such key is named once, here; modules
import the name instead of spelling the string, so a grep for the constant finds every reader and writer.

The ground floor: it imports nothing.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- message keys

META_KEY = "_mc"  # marker metadata (``{"marker": "micro" | "batch", ...}``) and other library flags
TOKENS_KEY = "_tokens"  # the cached token count of the message
ROW_KEY = "_row"  # the store's row id of the message (set by the store, meaningful on its rows only)
POS_KEY = "_pos"  # the message's position in the stored session (set by the store)
STATE_KEY = "_state"  # the row's state (active / absorbed): only on ``export(include_absorbed=True)``
ABSORBED_BY_KEY = "_absorbed_by"  # the row that absorbed this one: only on ``export(include_absorbed=True)``
HID_KEY = "_hid"  # the message's index in the client's full history (``identity``)
DIGEST_KEY = "_hd"  # the digest of that client message; several session messages may share one
PARTS_KEY = "_hn"  # how many session messages that client message became, when more than one
SRC_KEY = "_src"  # the index of the recorded message a replay appended (``replay --db`` resumes by it)
TS_KEY = "_ts"  # when the message was recorded, epoch seconds (importers; replay's simulated clock)
ITEMS_KEY = "_items"  # the OpenAI Agents SDK items a session message stands for (``integrations.openai_agents``)

IDENTITY_KEYS = (HID_KEY, DIGEST_KEY, PARTS_KEY)

# Bookkeeping: keys whose value holds only where it was set, so a message carried anywhere else (an
# exported transcript, another session) leaves them behind. One list, read two ways:
#
# - ``STORE_KEYS``: what the store (and the ledger's count) put on the rows it hands out. A session
#   drops these from a caller's message (``messages.caller_message``), else a message copied from another
#   session's transcript would pass for one already stored. ``_src`` must not be dropped there: ``replay``
#   appends each recorded message with its ``_src`` on purpose, through the same ``append``, so the store
#   keeps it and ``replay --db`` resumes.
# - ``BOOKKEEPING_KEYS``: ``STORE_KEYS`` plus ``_src``, what an exported transcript leaves out (``cli.py``):
#   a replay's pointer into the recording it read means nothing in a file of messages.
#
# So the two lists that used to be spelled apart (``session.py``: row, pos, tokens; ``cli.py``: those plus
# ``_src``) are both right for their use; the export one is *the* bookkeeping list, the session one is its
# store-assigned part. Identity (``_hid``/``_hd``/``_hn``), markers (``_mc``) and time (``_ts``) are on neither:
# they say what the message is and travel with it.
STORE_KEYS = (ROW_KEY, POS_KEY, TOKENS_KEY)
BOOKKEEPING_KEYS = (TOKENS_KEY, POS_KEY, ROW_KEY, SRC_KEY)

# Keys only the library and its store may set on a message: a marker, identity, store bookkeeping. A
# client's message never brings them (``identity.tagged`` drops them from what a converter returns).
RESERVED_KEYS = frozenset({META_KEY, ROW_KEY, POS_KEY, TOKENS_KEY, STATE_KEY, ABSORBED_BY_KEY, *IDENTITY_KEYS})

# --------------------------------------------------------------------------- store meta keys
# A stored session's meta is one JSON object (``SessionStore.update_meta`` / ``session_meta``).

MICRO_TURNS_META = "micro_turns"  # the every-N-turns cadence counter, so it goes on after a restart
FINALIZED_ROW_META = "finalized_row"  # the last row a finished turn ended on
FORKED_FROM_META = "forked_from"  # a fork: the session it was forked from
FORK_AT_META = "fork_at"  # a fork: the client index where the histories part
FORK_PREFIX_META = "fork_prefix_digests"  # a fork: the digests of the client prefix it started from
CARRIED_META = "carried"  # the engine memory carried to the next process (``carry``)
RECALL_META = "recall_conversation"  # the capability the recall tools (``microcompact mcp``) must be given
SECRETS_META = "secret_memory"  # keyed digests and shapes of the values redacted so far (``secret_memory``)
ROUTER_KEY_META = "key"  # a router branch: its conversation key
BRANCHES_META = "branches"  # a router key's first branch: how many branches the key has
REWRITE_META = "rewrite"  # ``serve --audit``: true when this conversation's compacted view goes up all the same
