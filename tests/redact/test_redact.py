"""Secret redaction: every kind of secret goes, its context stays, ordinary code stays readable."""

from __future__ import annotations

import copy
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.redact import REDACTED, error_text, redact_message, redact_text
from support.paths import NORMALIZED
from support.secrets_table import NOT_SECRETS as TABLE_NOT_SECRETS
from support.secrets_table import OPENAI_PROJECT, SECRET_FORMATS
from support.strategies import examples

TRANSCRIPT = NORMALIZED / "cc_fa812bfe.jsonl"


def fake(prefix: str, body: str) -> str:
    """A fake secret; built by concatenation so repository secret scanners do not flag this file."""
    return prefix + body


OPENAI = fake("sk-proj-", "Xq7Lm2Vb9Tn4Rk8Wp3Zs6Hd1Jf5Gc0Ya")
OPENAI_LEGACY = fake("sk-", "4fK9mQ2xL7vB1nR8tW3yZ6pD0sH5jC2gA9eU4iO7kM1qX3bN")
ANTHROPIC = fake("sk-ant-api03-", "Zt5Rw8Yq1Xe4Vu7Ti0Sp3Oa6Nd9Mc2Lb5Kf8Jh1Gi4Fk7-Ab_Cd9")
GITHUB_PAT = fake("ghp_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")
GITHUB_OAUTH = fake("gho_", "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2")
GITHUB_SERVER = fake("ghs_", "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8")
GITHUB_FINE = fake("github_pat_", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789ab")
AWS_ID = fake("AKIA", "Q3EXAMPLE7HZK2WMN")[:20]
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
SLACK = fake("xoxb-", "2468013579-1357924680-Gh7Jk2Lm9Np4Qr6St8Vw")
GOOGLE = fake("AIza", "SyD4x9Kq2Lm7Np3Rs8Tv1Wx6Yz0Ab5Cd9Ef")
STRIPE_SECRET = fake("sk_live_", "51H8aBcDeFgHiJkLmNoPqRsTuV")
STRIPE_RESTRICTED = fake("rk_live_", "51H8zYxWvUtSrQpOnMlKjIhGfE")
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkphbmUifQ."
    "Sfl4KxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
OPAQUE = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
PEM_BODY = "MIIEpAIBAAKCAQEA7d3h9Jx2mQ\nb7TzK1pV8wQ3rN6sY0cL5uF2gH9jD4kA"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"

# (id, text, secret that must disappear, context that must survive)
SECRETS = [
    ("openai-project", f"using key {OPENAI} for the call", OPENAI, ["using key ", " for the call"]),
    ("openai-legacy", f"OpenAI({OPENAI_LEGACY!r})", OPENAI_LEGACY, ["OpenAI('", "')"]),
    ("anthropic", f"x-api-key {ANTHROPIC} sent", ANTHROPIC, ["x-api-key ", " sent"]),
    (
        "github-pat",
        f"git push https://{GITHUB_PAT}@github.com/o/r.git",
        GITHUB_PAT,
        ["git push https://", "@github.com/o/r.git"],
    ),
    ("github-oauth", f"gh auth returned {GITHUB_OAUTH}.", GITHUB_OAUTH, ["gh auth returned ", "."]),
    ("github-server", f"[{GITHUB_SERVER}]", GITHUB_SERVER, ["[", "]"]),
    ("github-fine-grained", f"token: {GITHUB_FINE}", GITHUB_FINE, ["token: "]),
    (
        "aws-access-key-id",
        f"aws configure set aws_access_key_id {AWS_ID} --profile ci",
        AWS_ID,
        ["aws configure set aws_access_key_id ", " --profile ci"],
    ),
    (
        "aws-secret-assignment",
        f"aws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1",
        AWS_SECRET,
        ["aws_secret_access_key = ", "\nregion = eu-west-1"],
    ),
    (
        "aws-secret-json",
        f'{{"SecretAccessKey": "{AWS_SECRET}", "Expiration": "soon"}}',
        AWS_SECRET,
        ['{"SecretAccessKey": "', '", "Expiration": "soon"}'],
    ),
    ("slack", f"SLACK hook uses {SLACK} today", SLACK, ["SLACK hook uses ", " today"]),
    ("google", f"maps?key={GOOGLE}&q=x", GOOGLE, ["maps?key=", "&q=x"]),
    ("stripe-secret", f"stripe.api_key = '{STRIPE_SECRET}'", STRIPE_SECRET, ["stripe.api_key = '", "'"]),
    ("stripe-restricted", f"restricted {STRIPE_RESTRICTED} key", STRIPE_RESTRICTED, ["restricted ", " key"]),
    ("jwt", f"cookie session {JWT}; Path=/", JWT, ["cookie session ", "; Path=/"]),
    (
        "bearer-header",
        f"curl -H 'Authorization: Bearer {OPAQUE}' https://api.example.com/v1",
        OPAQUE,
        ["curl -H 'Authorization: Bearer ", "' https://api.example.com/v1"],
    ),
    (
        "basic-header",
        "Authorization: Basic dXNlcjpodW50ZXIyaHVudGVyMg==\nAccept: */*",
        "dXNlcjpodW50ZXIyaHVudGVyMg==",
        ["Authorization: Basic ", "\nAccept: */*"],
    ),
    (
        "bearer-json-header",
        f'{{"headers": {{"Authorization": "Bearer {OPAQUE}"}}}}',
        OPAQUE,
        ['{"headers": {"Authorization": "Bearer ', '"}}'],
    ),
    ("lone-bearer", f"sent bearer {OPAQUE} upstream", OPAQUE, ["sent bearer ", " upstream"]),
    (
        "url-password",
        "DATABASE_URL=postgres://admin:Zx81-kq!pw@db.internal:5432/app",
        "Zx81-kq!pw",
        ["DATABASE_URL=postgres://admin:", "@db.internal:5432/app"],
    ),
    ("url-password-at-sign", "redis://:p@ss9word@cache:6379/0", "p@ss9word", ["redis://:", "@cache:6379/0"]),
    (
        "env-password",
        "DB_USER=app\nDB_PASSWORD=correcthorse42\nDB_HOST=db",
        "correcthorse42",
        ["DB_USER=app\nDB_PASSWORD=", "\nDB_HOST=db"],
    ),
    ("env-quoted", 'export PASSWORD="s3cr3t value"', "s3cr3t value", ['export PASSWORD="', '"']),
    (
        "yaml-api-key",
        'openai:\n  api_key: "abcd1234efgh5678"\n  model: gpt',
        "abcd1234efgh5678",
        ['openai:\n  api_key: "', '"\n  model: gpt'],
    ),
    (
        "yaml-unquoted",
        "database:\n  password: hunter2hunter2\n  port: 5432",
        "hunter2hunter2",
        ["database:\n  password: ", "\n  port: 5432"],
    ),
    ("django-secret", "SECRET_KEY=django-insecure-7k$2m!x9q", "django-insecure-7k$2m!x9q", ["SECRET_KEY="]),
    ("query-token", "GET /callback?token=a8f3k29dk3&state=ok", "a8f3k29dk3", ["GET /callback?token=", "&state=ok"]),
    (
        "json-client-secret",
        '{"client_id": "web-app", "client_secret": "GOCSPX-f8Kq2mZ"}',
        "GOCSPX-f8Kq2mZ",
        ['{"client_id": "web-app", "client_secret": "', '"}'],
    ),
    ("json-number-password", '{"user": "bob", "password": 73194682}', "73194682", ['{"user": "bob", "password": ']),
    (
        "shell-token",
        "export GITHUB_TOKEN=not-a-prefixed-token-9d8f7",
        "not-a-prefixed-token-9d8f7",
        ["export GITHUB_TOKEN="],
    ),
    (
        "cli-flag",
        "mysql --user root --password Zq9xW2vB --host db",
        "Zq9xW2vB",
        ["mysql --user root --password ", " --host db"],
    ),
    ("dotted-key", "spring.datasource.password=Tr0ub4dor&3", "Tr0ub4dor", ["spring.datasource.password="]),
    ("ruby-hash", "{ :password => 'letmein123' }", "letmein123", ["{ :password => '", "' }"]),
    (
        "python-environ",
        'os.environ["DB_PASSWORD"] = "hunter2hunter2"',
        "hunter2hunter2",
        ['os.environ["DB_PASSWORD"] = "', '"'],
    ),
    ("http-api-key-header", "X-Api-Key: 5f1e2d3c4b5a69788796a5b4", "5f1e2d3c4b5a69788796a5b4", ["X-Api-Key: "]),
    ("pem", f"key file:\n{PEM}\nthat was it", "MIIEpAIBAAKCAQEA7d3h9Jx2mQ", ["key file:\n", "\nthat was it"]),
    (
        "pem-json-escaped",
        json.dumps({"private_key": PEM + "\n", "type": "service_account"}),
        "b7TzK1pV8wQ3rN6sY0cL5uF2gH9jD4kA",
        ['{"private_key": "', '"type": "service_account"}'],
    ),
    (
        "pem-cut-short",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n(output truncated)",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
        ["\n(output truncated)"],
    ),
]

NOT_SECRETS = [
    "password_field = form.password",
    "token_count = 5",
    "response = client.chat(max_tokens=1024, temperature=0)",
    "client = OpenAI(api_key=api_key)",
    "def login(username: str, password: str) -> Token:",
    "token: Token",
    "token = tokens[-1]",
    "password = getpass.getpass()",
    "api_key = os.environ['OPENAI_API_KEY']",
    "const token = await getToken();",
    "pad_token = tokenizer.eos_token",
    "eos_token=2",
    "self.password = password",
    "x = {'password': password}",
    "user.set_password(new_password)",
    "if token is None:\n    raise AuthError('missing token')",
    "PASSWORD=${DB_PASSWORD}",
    'password: "********"',
    "api_key: <your-api-key>",
    "export PWD=/home/user/project",
    'headers = {"Authorization": f"Bearer {token}"}',
    "The tokenizer splits text into tokens; Bearer token authentication is in RFC 6750.",
    "git clone https://github.com/org/repo.git && cd repo",
    "psql postgres://localhost:5432/app",
    "see risk-assessment-framework-2024-update-notes.md",
    "for token in tokens:\n    print(token)",
    "secret_santa.py: 3 passed",
    "password = ''",
    "Authorization header missing",
    "KeyError: 'api_key'",
]


@pytest.mark.parametrize("text, secret, context", [s[1:] for s in SECRETS], ids=[s[0] for s in SECRETS])
def test_secret_is_redacted_and_context_kept(text: str, secret: str, context: list[str]) -> None:
    out = redact_text(text)
    assert secret not in out
    assert REDACTED in out
    for piece in context:
        assert piece in out


def test_pem_block_is_removed_whole() -> None:
    out = redact_text(f"before\n{PEM}\nafter")
    assert out == f"before\n{REDACTED}\nafter"


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_code_is_unchanged(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [s[1] for s in SECRETS] + NOT_SECRETS)
def test_deterministic_and_idempotent(text: str) -> None:
    once = redact_text(text)
    assert redact_text(text) == once
    assert redact_text(once) == once


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.sampled_from(list("password=token:_apikey\"' \n-sk3Bx[]{}()/@.\\")), max_size=80))
def test_never_fails_and_is_stable_on_assignment_soup(text: str) -> None:
    once = redact_text(text)
    assert redact_text(text) == once
    assert redact_text(once) == once


def test_redact_message_content_parts_and_arguments() -> None:
    arguments = json.dumps(
        {
            "command": f"curl -H 'Authorization: Bearer {OPAQUE}' https://api.example.com",
            "env": {"API_KEY": OPENAI, "DB_PASSWORD": "correcthorse42"},
            "password": 73194682,
            "file_content": json.dumps({"token": 918273645, "secret": "inner-s3cret"}),
        }
    )
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"Using {GITHUB_PAT} now"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": arguments}}],
        "_tokens": 321,
    }
    before = copy.deepcopy(message)
    out = redact_message(message)
    assert message == before, "the input must not be mutated"
    assert out["content"][0]["text"] == f"Using {REDACTED} now"
    assert out["content"][1] == message["content"][1]
    redacted_args = out["tool_calls"][0]["function"]["arguments"]
    assert isinstance(redacted_args, str)
    parsed = json.loads(redacted_args)  # still valid JSON
    assert json.loads(parsed["file_content"]) == {"token": REDACTED, "secret": REDACTED}
    for secret in (OPAQUE, OPENAI, "correcthorse42", "73194682", "918273645", "inner-s3cret"):
        assert secret not in redacted_args
    assert "_tokens" not in out, "a cached count of the unredacted text must not travel with the copy"


def test_redact_message_string_content_and_tool_result() -> None:
    message = {"role": "tool", "tool_call_id": "call_1", "content": f"export OPENAI_API_KEY={OPENAI}\nok"}
    before = copy.deepcopy(message)
    out = redact_message(message)
    assert message == before
    assert out == {"role": "tool", "tool_call_id": "call_1", "content": f"export OPENAI_API_KEY={REDACTED}\nok"}


def test_real_transcript_tool_output_is_fast_and_untouched() -> None:
    if not TRANSCRIPT.exists():
        pytest.skip(f"shared transcripts not found at {TRANSCRIPT}")
    messages = [json.loads(line) for line in TRANSCRIPT.read_text().splitlines()]
    outputs = sorted(
        (m["content"] for m in messages if m["role"] == "tool" and isinstance(m["content"], str)), key=len, reverse=True
    )
    text = "\n".join(outputs)[:40_000]
    assert len(text) == 40_000
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        out = redact_text(text)
        timings.append(time.perf_counter() - start)
    assert out == text, "a real coding transcript holds no secrets: nothing should change"
    assert min(timings) < 0.005


def test_key_tail_without_begin_line_is_redacted_and_json_stays_valid():
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n-----END " + "PRIVATE KEY-----\n"
    assert redact_text("$ tail key.pem\n" + body) == "$ tail key.pem\n[REDACTED]\n"
    encoded = json.dumps({"output": "tail\n" + body})
    redacted = redact_text(encoded)
    assert "MIIEvQ" not in redacted and json.loads(redacted)["output"] == "tail\n[REDACTED]\n"
    unterminated = json.dumps({"output": "-----BEGIN " + "PRIVATE KEY-----\n" + body[:40]})
    assert "MIIEvQ" not in redact_text(unterminated) and json.loads(redact_text(unterminated))


def test_tool_call_arguments_given_as_objects_are_redacted_too():
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "http", "arguments": {"api_key": key, "url": "x"}}}
        ],
    }
    out = redact_message(msg)
    args = out["tool_calls"][0]["function"]["arguments"]
    assert isinstance(args, str) and key not in args and json.loads(args)["url"] == "x"


# --------------------------------------------------------------------------- the shared table (issue 8, item 10)


@pytest.mark.parametrize("text, secret", [row[1:] for row in SECRET_FORMATS], ids=[row[0] for row in SECRET_FORMATS])
def test_table_format_is_redacted(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and REDACTED in out
    assert redact_text(out) == out


@pytest.mark.parametrize("text, secret", [row[1:] for row in SECRET_FORMATS], ids=[row[0] for row in SECRET_FORMATS])
def test_table_format_is_redacted_inside_json_text(text: str, secret: str) -> None:
    """Tool-call arguments reach the summarizer as JSON text: escaped line breaks and quotes must not hide a
    secret, and the JSON must still parse."""
    encoded = json.dumps({"command": text, "cwd": "/srv"})
    out = redact_text(encoded)
    assert json.dumps(secret)[1:-1] not in out
    assert json.loads(out)["cwd"] == "/srv"


@pytest.mark.parametrize("text", TABLE_NOT_SECRETS)
def test_table_ordinary_text_is_unchanged(text: str) -> None:
    assert redact_text(text) == text
    assert redact_text(json.dumps(text)) == json.dumps(text)


def test_a_git_sha_is_not_an_aws_key_but_a_base64_key_is() -> None:
    sha = "3f2c1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e"
    assert redact_text(f"{sha}\n") == f"{sha}\n"
    assert redact_text("HEAD is now at\n" + sha.upper()) == "HEAD is now at\n" + sha.upper()
    key = "Kx9mQ2Lw7Vb4Rn8Tz3Yp6Hd1Jf5Gc0Sa+EbUoIqW"
    assert len(key) == 40 and redact_text(f"secret:\n{key}\n") == f"secret:\n{REDACTED}\n"


# Shapes that made a rule scan the rest of the text from every position (the PEM tail rule took 417 s on
# the first one). Each is 1 MB; redaction must stay linear.
ADVERSARIAL = {
    "base64-lines-and-private-key": "PRIVATE KEY\n" + ("A" * 20 + "\n") * 47_000,
    "end-lines": ("A" * 20 + "\n-----END PRIVATE KEY-----") * 22_000,
    "repeated-assignment": "password=" * 111_000,
    "repeated-open-quote": 'password="' * 100_000,
    "unclosed-quote": "password='" + "a" * 1_000_000,
    "escaped-quotes": "password='x password=\\'" * 40_000,
    "ampersand-tail": "password=a" + "&b" * 500_000,
    "jwt-prefix-run": "eyJ" * 333_000,
    "base64-runs-on-lines": ("\n" + "Ab1+" * 10) * 24_000,
    "csv-fields": ",".join(["Ab1+" * 10] * 24_000) + " secret access key",
    "pgpass-like": "h:5432:d:u:" * 90_000,
    "netrc-like": "machine " + "login x password " * 58_000,
    "curl-flags": "curl " + "-u a:" * 200_000,
    "backslashes": 'password="' + "\\" * 1_000_000,
    "cookie-without-pairs": ("Cookie: " + "a" * 8_200 + "\n") * 120,
    "repeated-cookie-headers": "cookie:" * 150_000,
}


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_one_megabyte_of_adversarial_text_is_redacted_quickly(text: str) -> None:
    start = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - start < 3.0


def test_an_error_text_is_redacted_before_it_is_cut() -> None:
    """A secret across the cut would leave a half the patterns no longer recognise: redact first."""
    secret = OPENAI_PROJECT
    exc = RuntimeError("x" * 185 + f" {secret} tail")
    text = error_text(exc)
    assert len(text) <= 200 and secret[:10] not in text
    assert error_text(RuntimeError(f"bad value {secret}"), 500) == f"bad value {REDACTED}"
