"""The secret memory on its own: what it remembers, what it hides, what it stores, and that ordinary text
(git SHAs, UUIDs, lockfile hashes, words) never changes under it."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.redact import REDACTED, redact_text, remembering
from microcompact.redact.secret_memory import KEY_FILE, MIN_LENGTH, SecretMemory, install_key, worth_remembering
from support.secrets_table import NOT_SECRETS, fake

AWS = fake("wJalrXUtnFEMI/K7MDENG", "/bPxRfiCYEXAMPLEKEY")
PW = fake("Tr0ub4dor", "&3xQzK")
SHA = "3f2c1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e"


def taught(*texts: str) -> SecretMemory:
    """A memory that saw ``texts`` redacted."""
    memory = SecretMemory()
    with remembering(memory):
        for text in texts:
            redact_text(text)
    return memory


# Values a rule redacts that are ordinary text: never remembered, so never hidden elsewhere.
ORDINARY_VALUES = ["Swordfish", "changeme", "Battery", "my.deploy.token.value", "hunter2", "20240101", "aaaa1111"]


@pytest.mark.parametrize("value", ORDINARY_VALUES)
def test_ordinary_values_are_not_remembered(value: str) -> None:
    assert not worth_remembering(value)
    memory = taught(f"password: {value}")
    assert not memory and redact_text(f"the {value} works") == f"the {value} works"


@pytest.mark.parametrize("value", [AWS, PW, "Pg7Wq2Zx9vLm", SHA, str(uuid.UUID(int=7**40))])
def test_generated_looking_values_are(value: str) -> None:
    assert worth_remembering(value)


@pytest.mark.parametrize(
    "bare",
    [
        "uses key {v} for the service",
        "{v}",
        "({v})",
        "'{v}'",
        "key={v}&x=1",
        "done: {v}.",
        "line\n{v}\nnext",
        '{{"k": "{v}"}}',
    ],
)
def test_a_remembered_value_is_hidden_wherever_it_stands_alone(bare: str) -> None:
    memory = taught(f"AWS_SECRET_ACCESS_KEY={AWS}")
    with remembering(memory):
        out = redact_text(bare.format(v=AWS))
    assert AWS not in out and REDACTED in out
    assert out == bare.format(v=REDACTED)


def test_escaped_slashes_and_json_line_breaks_are_seen_through() -> None:
    memory = taught(f"AWS_SECRET_ACCESS_KEY={AWS}")
    text = json.dumps({"out": f"cached\n{AWS}\n"}).replace("/", "\\/")
    with remembering(memory):
        out = redact_text(text)
    assert json.loads(out) == {"out": f"cached\n{REDACTED}\n"}


def test_a_value_inside_a_longer_token_is_not_a_mention() -> None:
    memory = taught(f"password = '{PW}'")
    for text in [f"x{PW}", f"{PW}9", f"{PW}&more"]:
        with remembering(memory):
            assert redact_text(f"see {text} here") == f"see {text} here"


def test_without_an_active_memory_nothing_is_remembered_or_hidden() -> None:
    memory = taught()
    redact_text(f"AWS_SECRET_ACCESS_KEY={AWS}")
    assert not memory
    taught(f"AWS_SECRET_ACCESS_KEY={AWS}")
    assert redact_text(f"uses {AWS}") == f"uses {AWS}"  # memories belong to a session, never global


def test_export_holds_digests_and_shapes_never_a_value() -> None:
    memory = taught(f"AWS_SECRET_ACCESS_KEY={AWS}", f"password = '{PW}'")
    data = memory.export()
    text = json.dumps(data)
    assert AWS not in text and PW not in text and AWS[:10] not in text and PW[:6] not in text
    assert sorted(data["shapes"]) == [["&", len(PW)], ["/", len(AWS)]]
    (digests,) = data["digests"].values()
    assert len(digests) == 2 and all(len(d) == 32 for d in digests)
    again = SecretMemory()
    assert again.restore(json.loads(text))
    with remembering(again):
        assert redact_text(f"{AWS} and {PW}") == f"{REDACTED} and {REDACTED}"


@pytest.mark.parametrize("data", [None, 3, "x", {}, {"v": 2}, {"v": 1, "digests": [], "shapes": {}}])
def test_a_malformed_stored_memory_is_ignored(data: object) -> None:
    assert not SecretMemory().restore(data)


def test_bad_entries_inside_a_stored_memory_are_skipped() -> None:
    memory = SecretMemory()
    assert memory.restore({"v": 1, "digests": {"k": [1, None]}, "shapes": [["/", "40"], [1], ["", 3], ["", 9]]})
    assert redact_text("ordinary words stay") == "ordinary words stay"


def test_the_install_key_is_created_once_owner_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = install_key(home)
    assert len(key) == 32 and install_key(home) == key
    assert (home / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert os.stat(home).st_mode & 0o777 == 0o700


def test_digests_depend_on_the_install_key(tmp_path: Path) -> None:
    one, two = SecretMemory(tmp_path / "a"), SecretMemory(tmp_path / "b")
    for memory in (one, two):
        with remembering(memory):
            redact_text(f"AWS_SECRET_ACCESS_KEY={AWS}")
    assert one.export()["digests"] != two.export()["digests"]
    stranger = SecretMemory(tmp_path / "b")
    assert stranger.restore(one.export())
    with remembering(stranger):  # another install's digests cannot match here
        assert redact_text(f"uses {AWS}") == f"uses {AWS}"


# --------------------------------------------------------------------------- ordinary text is unchanged

# A memory that remembered secrets of many shapes (so every scanner runs), none of them ordinary text.
BUSY = taught(
    f"AWS_SECRET_ACCESS_KEY={AWS}",
    f"password = '{PW}'",
    "postgres://admin:Pg7Wq2Zx9vLm@db/app",
    "db:5432:app:svc:Rt5Yu8Io2Kp",
    "SIGNING_KEY=k9-Lm2.Qx7_Vb4~Zp",
    "Cookie: sid=Q1w2E3r4T5y6U7i8",
)

hex_sha = st.text("0123456789abcdef", min_size=7, max_size=64)
uuids = st.uuids().map(str)
words = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=30)
numbers = st.integers(min_value=0, max_value=10**30).map(str)
punct = st.sampled_from([" ", "\n", ", ", ". ", "/", "\\/", ":", "-", "_", '"', "=", "&", "\\n"])
ordinary = st.lists(st.one_of(hex_sha, uuids, words, numbers, punct), max_size=40).map("".join)


def test_busy_memory_remembered_every_shape() -> None:
    assert len(BUSY.export()["shapes"]) == 6


@given(ordinary)
def test_ordinary_text_is_unchanged_by_the_memory(text: str) -> None:
    assert BUSY.hide(text, REDACTED) == text


@given(st.lists(st.one_of(hex_sha, uuids), min_size=1, max_size=10))
def test_shas_and_uuids_around_a_remembered_value_stay(parts: list[str]) -> None:
    text = " ".join([*parts, AWS, *parts])
    out = BUSY.hide(text, REDACTED)
    assert out == " ".join([*parts, REDACTED, *parts])


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_table_ordinary_text_is_unchanged_by_a_busy_memory(text: str) -> None:
    with remembering(BUSY):
        assert redact_text(text) == text
        assert redact_text(json.dumps(text)) == json.dumps(text)


def test_minimum_length_is_enforced() -> None:
    assert not worth_remembering("Ab1" + "x" * (MIN_LENGTH - 4))


def test_a_real_transcript_is_unchanged_by_a_busy_memory() -> None:
    """Every text of a recorded Claude Code session redacts the same with the busy memory as without it."""
    from support.paths import NORMALIZED

    texts: list[str] = []
    for line in (NORMALIZED / "cc_fa812bfe.jsonl").read_text(encoding="utf-8").splitlines():
        message = json.loads(line)
        content = message.get("content")
        texts += [content] if isinstance(content, str) else []
        texts += [json.dumps(c.get("function", {}).get("arguments")) for c in message.get("tool_calls") or []]
    assert len(texts) > 100
    plain = [redact_text(t) for t in texts]
    with remembering(BUSY):
        assert [redact_text(t) for t in texts] == plain


REMEMBERED = [AWS, PW, "Pg7Wq2Zx9vLm", "Rt5Yu8Io2Kp", "k9-Lm2.Qx7_Vb4~Zp", "Q1w2E3r4T5y6U7i8"]


@given(st.lists(st.one_of(ordinary, st.sampled_from(REMEMBERED)), max_size=20), punct)
def test_remembered_values_never_survive_and_hiding_is_idempotent(parts: list[str], glue: str) -> None:
    text = glue.join(parts)
    with remembering(BUSY):
        out = redact_text(text)
        assert redact_text(out) == out
    standalone = [v for v in REMEMBERED if v in parts]
    # a value glued to letters or digits of its neighbours is another token; with word separators it goes
    if glue in (" ", "\n", ", "):
        assert [v for v in standalone if v in out.split(glue)] == []
