"""The shared table of secret formats: add a row for every new find.

Each row is (format name, sample text as it appears in a transcript, the secret substring that must not
survive redaction). Where a rule used to catch only the start of a secret, the substring is the part it
missed (the tail after ``&``, the token part of a webhook URL). Tests in redact/test_redact.py, and the end-to-end
tests that plant every row in a transcript (micro pass, batch compaction, HTTP summarizer requests), are
driven from ``SECRET_FORMATS``. ``NOT_SECRETS`` lists ordinary text that must come through unchanged.
``REMENTIONS`` pairs a value given with its context with a later bare mention (redact/test_secrets_remembered.py).

Samples are fake and built by concatenation so that repository secret scanners do not flag this file.
"""

from __future__ import annotations


def fake(*parts: str) -> str:
    return "".join(parts)


AWS_SECRET = fake("wJalrXUtnFEMI/K7MDENG", "/bPxRfiCYEXAMPLEKEY")  # 40 characters
SENDGRID = fake("SG.", "ngeVfQFYQlKU0ufo8x5d1A", ".", "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr")
SLACK_HOOK_SECRET = fake("Xq7Lm2Vb9Tn4", "Rk8Wp3Zs6Hd1")
DISCORD_HOOK_SECRET = fake("AbCdEf-GhIjKlMn", "OpQrStUvWxYz_0123456789abcdefghijklmnopqrstuvwxyzABCDEF")
AZURE_KEY = fake("Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFi", "Y2RlZmdoaWprbG1ub3A+/w9Q8R7s6T5u4V3w2X1yZ0a==")
GITHUB_FINE = fake("github_pat_", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789ab")
GITLAB = fake("glpat-", "xR7kQ2mZ9vB4nL8wT3yP")
STRIPE_TEST = fake("sk_test_", "4eC39HqLyjWDarjtT1zdp7dc")
GOOGLE = fake("AIza", "SyD4x9Kq2Lm7Np3Rs8Tv1Wx6Yz0Ab5Cd9Ef")
NPM = fake("npm_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")
HF = fake("hf_", "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h")
ANTHROPIC = fake("sk-ant-api03-", "Zt5Rw8Yq1Xe4Vu7Ti0Sp3Oa6Nd9Mc2Lb5Kf8Jh1Gi4Fk7-Ab_Cd9")
OPENAI_PROJECT = fake("sk-proj-", "Xq7Lm2Vb9Tn4Rk8Wp3Zs6Hd1Jf5Gc0Ya")
OPENAI_SVCACCT = fake("sk-svcacct-", "Qz8Wm3Nv7Bx2Lk9Jh4Gf6Dd1Ss5Aa0Pp")
SLACK_APP = fake("xapp-", "1-A0123456789-1234567890123-abcdef0123456789")
DIGITALOCEAN = fake("dop_v1_", "0f9e8d7c6b5a49382716f5e4d3c2b1a00f9e8d7c6b5a49382716f5e4d3c2b1a0")
SHOPIFY = fake("shpat_", "0a1b2c3d4e5f67890a1b2c3d4e5f6789")
TWILIO_KEY = fake("SK", "0123456789abcdef0123456789abcdef")
LONG_QUOTED = fake("Lq", "9xZ" * 500)  # 1,502 characters
PYPI = fake("pypi-AgEIcHlwaS5vcmc", "CJGQ4ZTQ2MjdiLTk1ZjMtNGIwNy1hYmJlLTYyNmQxMzAzZDJhNAACKlszLCJhYmMiXQ")
MAILGUN = fake("key-", "3ax6xnjp29jd6fds4gc373sgvjxteol0")
DATABRICKS = fake("dapi", "0123456789abcdef0123456789abcdef")
SQUARE = fake("sq0atp-", "Q2s1XbL8mN4pR7tV0wY3zA")
AGE = fake("AGE-SECRET-KEY-1", "QQPQ7S2VJQ9ZK8V4GX0E9Y6N5M3L2K1J0H9G8F7D6S5A4P3O2I1U0Y9T8R")[:74]
AWS_SECRET_ESCAPED = AWS_SECRET.replace("/", "\\/")  # as JSON encoders that escape slashes write it
TELEGRAM = fake("123456789", ":AAH", "k9Lm2Qx7Vb4Rn8Tz3Yp6Hd1Jf5Gc0SaX")  # 9 digits, colon, AA + 33

# (format name, sample text, the secret substring that must disappear)
SECRET_FORMATS: list[tuple[str, str, str]] = [
    # --- the list (item 10)
    ("password-tail-after-ampersand", "DB_URL_PARAMS password=Tr0ub4dor&3xQzK", "3xQzK"),
    ("password-tail-after-semicolon", "Server=db;Database=app;Uid=app;Pwd=Lm4x;Tz9qR;", "Tz9qR"),
    ("password-query-ampersand", "connect?user=bob&password=ab7&c9Kq&mode=ro", "c9Kq"),
    ("password-capitalised-key", "Username: alice\nPassword: Swordfish\n", "Swordfish"),
    ("password-upper-key", "PASSWORD=Swordfish\nUSER=alice", "Swordfish"),
    ("password-capitalised-word-value", "the Password is: Correct Horse\npassword: Battery", "Battery"),
    (
        "slack-webhook",
        "curl -X POST https://hooks.slack.com/services/T0AB12CD3/B0CD34EF5/" + SLACK_HOOK_SECRET,
        SLACK_HOOK_SECRET,
    ),
    (
        "discord-webhook",
        "webhook = 'https://discord.com/api/webhooks/123456789012345678/" + DISCORD_HOOK_SECRET + "'",
        DISCORD_HOOK_SECRET,
    ),
    (
        "discordapp-webhook",
        "https://discordapp.com/api/webhooks/987654321098765432/" + DISCORD_HOOK_SECRET,
        DISCORD_HOOK_SECRET,
    ),
    (
        "azure-account-key",
        "DefaultEndpointsProtocol=https;AccountName=acct01;AccountKey="
        + AZURE_KEY
        + ";EndpointSuffix=core.windows.net",
        AZURE_KEY[:40],
    ),
    (
        "azure-shared-access-key",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
        "SharedAccessKey=" + AZURE_KEY[:44] + ";EntityPath=q",
        AZURE_KEY[:40],
    ),
    ("sendgrid", "SENDGRID says: use " + SENDGRID + " for mail", SENDGRID[3:25]),
    ("curl-user", "curl -u admin:Sup3rS3cretPw https://api.example.com/v1/items", "Sup3rS3cretPw"),
    ("curl-user-long-flag", "curl --user 'deploy:Hx82!kQp' -X GET https://x.example.com", "Hx82!kQp"),
    ("mysql-short-password-flag", "mysql -h db -u root -pS3cr3tPw app < dump.sql", "S3cr3tPw"),
    ("mysql-long-password-flag", "mysqldump --user=root --password=Pz93xLm app > out.sql", "Pz93xLm"),
    ("pgpass-line", "$ cat ~/.pgpass\ndb.example.com:5432:appdb:appuser:Pg5ecretPw\n", "Pg5ecretPw"),
    ("pgpass-wildcard", "*:*:*:postgres:Zk4pQ9wE", "Zk4pQ9wE"),
    ("netrc-line", "machine api.example.com login alice password N3trcPw!x", "N3trcPw!x"),
    ("netrc-multiline", "machine github.com\n  login bob\n  password Gh7netrcQ\n", "Gh7netrcQ"),
    ("env-any-key", "STRIPE_WEBHOOK_KEY=whk9Lm2Qx7Vb\nDEBUG=1", "whk9Lm2Qx7Vb"),
    ("env-any-token", "export CI_JOB_TOKEN=my.deploy.token.value", "my.deploy.token.value"),
    ("env-any-secret-path-like", "JWT_SECRET=/s3cr3t-signing-value", "s3cr3t-signing-value"),
    ("env-any-password-word", "MYSQL_ROOT_PASSWORD=changeme", "changeme"),
    ("env-quoted-key", 'export SIGNING_KEY="v9Qm2Lx7Zp4K"', "v9Qm2Lx7Zp4K"),
    ("json-any-token", '{"SERVICE_TOKEN": "svc-9d8f7e6d5c4b", "debug": true}', "svc-9d8f7e6d5c4b"),
    ("json-any-key", '{"MAPBOX_KEY": "mbx7Qk2Lp9Zx"}', "mbx7Qk2Lp9Zx"),
    ("quoted-value-over-1024", 'config = {"client_secret": "' + LONG_QUOTED + '"}', LONG_QUOTED[-40:]),
    ("quoted-value-over-1024-single", "password = '" + LONG_QUOTED + "'", LONG_QUOTED[:40]),
    ("aws-secret-bare-line", "Access key ID: AKIA-redacted-elsewhere\n" + AWS_SECRET + "\n", AWS_SECRET),
    ("aws-secret-bare-csv", "User,Access key ID,Secret access key\nci,AKIAXXXX," + AWS_SECRET, AWS_SECRET),
    # --- more, found thinking like an attacker
    ("github-fine-grained", "GH=" + GITHUB_FINE, GITHUB_FINE),
    ("gitlab", "git remote add origin https://oauth2:" + GITLAB + "@gitlab.com/g/p.git", GITLAB),
    ("stripe-test", "Stripe.api_key = " + STRIPE_TEST, STRIPE_TEST),
    ("google-api-key", "key=" + GOOGLE, GOOGLE),
    ("npm-token", "//registry.npmjs.org/:_authToken=" + NPM, NPM),
    ("npmrc-auth", "//registry.example.com/:_auth=ZGVwbG95OnMzY3IzdA==", "ZGVwbG95OnMzY3IzdA=="),
    ("huggingface", "huggingface-cli login --token " + HF, HF),
    ("anthropic", "ANTHROPIC=" + ANTHROPIC, ANTHROPIC),
    ("openai-project", "client = OpenAI(api_key='" + OPENAI_PROJECT + "')", OPENAI_PROJECT),
    ("openai-service-account", "using " + OPENAI_SVCACCT, OPENAI_SVCACCT),
    ("slack-app-token", "SLACK_APP=" + SLACK_APP, SLACK_APP),
    ("basic-auth-header", "Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw=="),
    ("cookie-header", "Cookie: theme=dark; sessionid=q8w7e6r5t4y3u2i1o0p9", "q8w7e6r5t4y3u2i1o0p9"),
    ("set-cookie-header", "Set-Cookie: auth_token=Zx9Yw8Vu7Ts6Rq5Po4; Path=/; HttpOnly", "Zx9Yw8Vu7Ts6Rq5Po4"),
    ("curl-cookie", 'curl -H "Cookie: _gh_sess=K7mP2xQ9vL4nB8wR3tY6; logged_in=yes" https://x', "K7mP2xQ9vL4nB8wR3tY6"),
    ("basic-auth-in-url", "https://ci-bot:Zz9Qp4Lm@registry.example.com/v2/", "Zz9Qp4Lm"),
    ("x-api-key-header", "-H 'x-api-key: 5f1e2d3c4b5a69788796a5b4'", "5f1e2d3c4b5a69788796a5b4"),
    ("digitalocean", "doctl auth init -t " + DIGITALOCEAN, DIGITALOCEAN),
    ("shopify", "X-Shopify-Access-Token: " + SHOPIFY, SHOPIFY),
    ("twilio-api-key", "TWILIO=" + TWILIO_KEY + " sid", TWILIO_KEY[2:]),
    ("docker-login-password", "docker login -u ci -p Dk8rPw9zQ registry.example.com", "Dk8rPw9zQ"),
    ("sshpass", "sshpass -p 'Ssh9Pw!z' ssh root@host", "Ssh9Pw!z"),
    (
        "azure-sas-signature",
        "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030&sig=Ab9%2Bc8Dz7%3D&sp=r",
        "Ab9%2Bc8Dz7%3D",
    ),
    ("pypi-token", "twine upload -p " + PYPI + " dist/*", PYPI),
    ("mailgun", "MG=" + MAILGUN, MAILGUN),
    ("databricks", "host=x token " + DATABRICKS, DATABRICKS),
    ("square", "SQUARE=" + SQUARE, SQUARE),
    ("age-secret-key", "# created: 2024\n" + AGE, AGE[16:]),
    ("telegram-bot", "https://api.telegram.org/bot" + TELEGRAM + "/getMe", TELEGRAM[10:]),
    ("docker-config-auth", '{"auths": {"ghcr.io": {"auth": "ZGVwbG95OkdoN3hLcTJtWnA="}}}', "ZGVwbG95OkdoN3hLcTJtWnA="),
    (
        "private-key-json-escaped",
        ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n-----END PRIVATE KEY-----\\n"}'),
        "MIIEvQIBADANBgkqhkiG9w0B",
    ),
    # --- issue 20: JSON with escaped slashes (PHP, Java and some loggers write ``\/``)
    ("json-escaped-url-password", '{"url": "postgres:\\/\\/admin:Pa55w0rdX9@db.internal\\/app"}', "Pa55w0rdX9"),
    (
        "json-escaped-aws-assignment",
        '{"env": "AWS_SECRET_ACCESS_KEY=' + AWS_SECRET_ESCAPED + '"}',
        AWS_SECRET_ESCAPED[14:],
    ),
    ("json-escaped-aws-line", '{"out": "[default]\\n' + AWS_SECRET_ESCAPED + '\\n"}', AWS_SECRET_ESCAPED),
    (
        "json-escaped-slack-webhook",
        '{"hook": "https:\\/\\/hooks.slack.com\\/services\\/T0AB12CD3\\/B0CD34EF5\\/' + SLACK_HOOK_SECRET + '"}',
        SLACK_HOOK_SECRET,
    ),
    (
        "json-escaped-basic-auth-url",
        '{"registry": "https:\\/\\/ci-bot:Zq8Lp3Wm@registry.example.com\\/v2"}',
        "Zq8Lp3Wm",
    ),
    # --- issue 20: passwords that start with a slash
    ("password-leading-slash", "password=/Xk9pQz2Lm", "Xk9pQz2Lm"),
    ("password-colon-leading-slash", "db_password: /Qw8Zr3Nx", "Qw8Zr3Nx"),
    ("url-password-leading-slash", "postgres://admin:/Vb7Kq2Pz@db.internal/app", "Vb7Kq2Pz"),
    ("flag-password-leading-slash", "psql-wrapper --password /Tq4Wm9Xr", "Tq4Wm9Xr"),
    # --- issue 20: .pgpass lines as shells write them
    ("pgpass-echo-quoted", "echo 'db.internal:5432:app:svc:Pg7Zq2Lx' > ~/.pgpass", "Pg7Zq2Lx"),
    ("pgpass-echo-append", "echo db.internal:5432:app:svc:Pg8Rt3Mw >> ~/.pgpass", "Pg8Rt3Mw"),
    ("pgpass-trailing-space", "db.internal:5432:app:svc:Pg4Hn6Vs  \nnext", "Pg4Hn6Vs"),
    ("pgpass-escaped-colon", "db.internal:5432:app:svc:Pg9\\:Kx4Tz", "Kx4Tz"),
]

# Ordinary text that looks a little like the formats above and must come through unchanged.
NOT_SECRETS: list[str] = [
    "Set-Cookie: theme=dark; Path=/; Max-Age=3600; SameSite=Lax",
    "commit 3f2c1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e",  # a 40-char git SHA is not an AWS key
    "3f2c1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e\n",
    "src/microcompact/redact.py/src/microcompact\n",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMN\n",
    "GET /search?q=x&page=2&sort=asc",
    "primary_key=True",
    "sort_key = lambda m: m.ts",
    'cache_key = f"{user}:{page}"',
    "docker run -u 1000:1000 image",
    "curl -s http://127.0.0.1/health\nTS=$(date -u +%Y-%m-%dT%H:%M:%SZ)",  # -u on the next line is date's
    "git push -u origin main",
    "tar -cpf out.tar dir",
    "mysql -p",
    "ssh -p 2222 host",
    "localhost:5432:postgres",
    "machine learning is fun; login to the box with your password",
    "token: Token",
    "def connect(password: Password) -> None:",
    "The Password field is required.",
    "MAX_TOKENS=4096",
    "NUM_KEYS=12",
    "PRIMARY_KEY=id",
    "https://hooks.slack.com/services/",
    "base64: SGVsbG8gd29ybGQ=",
    '{"auth": "oauth2", "mode": "key-value"}',
    "key-valuestoreforthesessioncaches",
    '{"auth": "SGVsbG8gd29ybGQ="}',  # base64 of "Hello world": not a user:password pair
    '{"oauth": "ZGVwbG95OkdoN3hLcTJtWnA="}',  # only the key "auth" (Docker's)
    # --- issue 20: slashes, paths under secret names, pgpass documentation, hashes in lockfiles
    '{"path": "src\\/app\\/main.py", "sha": "3f2c1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e"}',
    '"resolved": "https:\\/\\/registry.npmjs.org\\/a\\/-\\/a-1.0.0.tgz"',
    "PWD=/home/me/project",
    "password_file: /run/secrets/db_password",
    "secret: /run/secrets/db",
    "hostname:port:database:username:password",
    "https://user@example.com:8443/path@v2",
    '"integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+LFTGHVxVjcXPs17LhbZVGedAJv8XZ1tvj5FvSg=="',
    'resolved "https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#679591c564c3bffaae8454cf0b3df370c3d6911c"',
    '{file = "requests-2.31.0-py3-none-any.whl", '
    'hash = "sha256:58cd2187c01e70e6e26505bca751777aa9f2ee0b7f4300988b709f44e013003f"}',
    'checksum = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"',
    "request 550e8400-e29b-41d4-a716-446655440000 done",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
]


AWS_1 = AWS_SECRET
AWS_2 = fake("Kx9mQ2Lw7Vb4Rn8Tz3Yp", "6Hd1Jf5Gc0Sa+EbUoIqW")
AWS_3 = fake("Qp4Lm8Nz2Xc6Vb0Rt5Yh", "/Jk9Gf3Ds7Aw1Eq6Ui2O")
URL_PW = fake("Pg7Wq2", "Zx9vLm")
PGPASS_PW = fake("Rt5Yu8", "Io2Kp")
QUOTED_PW = fake("Tr0ub4dor", "&3xQzK")
COOKIE = fake("q8w7e6r5t4", "y3u2i1o0p9")
BEARER = fake("Zx9Yw8Vu7Ts6", "Rq5Po4Nm3")


def escaped(value: str) -> str:
    return value.replace("/", "\\/")


# Re-mentions (issue 20): the secret memory must hide the bare mention once the value was seen in context.
# (case, text that gives the value with its context, a later text that mentions it bare, the value)
REMENTIONS: list[tuple[str, str, str, str]] = [
    ("aws-env-then-bare", f"AWS_SECRET_ACCESS_KEY={AWS_1}", f"uses key {AWS_1} for the service", AWS_1),
    ("url-password-then-bare", f"postgres://admin:{URL_PW}@db.internal/app", f"the password {URL_PW} opens it", URL_PW),
    ("pgpass-then-bare", f"db.internal:5432:app:svc:{PGPASS_PW}", f"retry with {PGPASS_PW}.", PGPASS_PW),
    ("quoted-password-then-bare", f'password = "{QUOTED_PW}"', f"login failed for {QUOTED_PW}, locked", QUOTED_PW),
    ("cookie-then-bare", f"Cookie: theme=dark; sessionid={COOKIE}", f"session {COOKIE} expired", COOKIE),
    ("bearer-then-bare", f"Authorization: Bearer {BEARER}", f"the token {BEARER} still works", BEARER),
    (
        "escaped-context-then-bare",
        f'{{"env": "AWS_SECRET_ACCESS_KEY={escaped(AWS_3)}"}}',
        f"key {AWS_3} rotated",
        AWS_3,
    ),
    ("context-then-escaped-bare", f"aws_secret_access_key = {AWS_2}", f'{{"cached": "{escaped(AWS_2)}"}}', AWS_2),
]
