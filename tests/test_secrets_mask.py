"""Secret masking: obvious credentials go, prose, code and URLs stay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot.secrets_mask import REDACTED, find_secrets, mask_message, mask_secrets

SECRETS = {
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdefgh",
    "openai": "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
    "openai-legacy": "sk-0123456789abcdefghijABCDEFGHIJ0123456789abcd",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJklmnop",
    "github-pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "google": "AIzaSyA-0123456789abcdefghijklmnopqrstu",
    "openrouter": "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",
    "github-oauth": "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    "gitlab": "glpat-AbCdEf0123456789xyzW",
    "slack-user": "xoxp-1234567890-0987654321-AbCdEf",
    "aws-session": "ASIAY34FZKBOKMUTVV7A",
    "stripe-live": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-restricted": "rk_live_51H0abcDEFghiJKLmnoPQRst",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "groq": "gsk_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5m",
    "xai": "xai-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1J",
    "npm": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "telegram": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_known_key_shapes_are_masked(kind):
    secret = SECRETS[kind]
    out = mask_secrets(f"my key is {secret} ok")
    assert secret not in out
    assert REDACTED in out
    assert out.startswith("my key is ") and out.endswith(" ok")


def test_a_short_prefix_is_kept_for_recognition():
    assert mask_secrets(SECRETS["anthropic"]) == "sk-ant-[REDACTED]"
    assert mask_secrets(SECRETS["github"]) == "ghp_[REDACTED]"


@pytest.mark.parametrize(
    "text, secret",
    [
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjEyM30.abc123",
            "eyJhbGciOiJIUzI1NiJ9",
        ),
        ("api_key=abcd1234efgh5678", "abcd1234efgh5678"),
        ('{"apiKey": "hunter-two"}', "hunter-two"),
        ("export OPENAI_API_KEY='abc'", "'abc'"),
        ("password = hunter2", "hunter2"),
        ("DB_PASSWORD: s3cretpass", "s3cretpass"),
        ("https://bob:pa55word@example.com/repo.git", "pa55word"),
        ("GET /v1/data?access_token=zz9900aa&x=1", "zz9900aa"),
    ],
)
def test_assignments_and_headers_are_masked(text, secret):
    out = mask_secrets(text)
    assert secret not in out, out
    assert REDACTED in out


def test_pem_private_key_block_is_masked_whole():
    pem = (
        "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234\nabcdEFGH==\n"
        "-----END RSA PRIVATE KEY-----\nafter"
    )
    out = mask_secrets(pem)
    assert "MIIEow" not in out and "abcdEFGH" not in out
    assert out.startswith("before\n-----BEGIN RSA PRIVATE KEY-----") and out.endswith("after")


def test_a_truncated_pem_block_is_masked_to_the_end():
    out = mask_secrets("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert "MIIEvQ" not in out


@pytest.mark.parametrize(
    "text",
    [
        "The user prefers dark mode and lives in Berlin; meeting moved to 2026-03-04 at 14:00.",
        "def connect(api_key: str, password: str | None = None):\n    return Client(api_key=api_key)",
        "token = self.token\nmax_tokens=4096\ncontext_window_tokens: 65536",
        "See https://github.com/HKUDS/nanobot/blob/main/README.md and http://localhost:8080/a@b",
        "Use scikit-learn (sk-learn) and task-runner-configuration-for-things",
        "git clone git@github.com:org/repo.git",
        "The bearer of bad news arrived. Token: 42.",
        "ask-anthropic-about-the-long-hyphenated-identifier-name",
    ],
)
def test_prose_code_and_urls_are_left_alone(text):
    assert mask_secrets(text) == text


def test_masking_twice_changes_nothing_more():
    text = (
        " ".join(SECRETS.values()) + ' api_key="abc123" password=hunter2 Bearer abc123def456ghi789'
    )
    once = mask_secrets(text)
    assert mask_secrets(once) == once


@settings(deadline=None)
@given(st.text(max_size=200))
def test_mask_is_idempotent_and_total_on_any_text(text):
    once = mask_secrets(text)
    assert mask_secrets(once) == once


def test_aws_secret_key_is_masked_beside_its_access_key():
    text = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabcd\n"
    out = mask_secrets(text)
    assert "wJalrXUtnFEMI" not in out and "IOSFODNN7EXAMPLE" not in out


def test_netrc_password_is_masked():
    out = mask_secrets("machine api.example.com login bob password hunter22\n")
    assert "hunter22" not in out and "login bob" in out


def test_exact_values_of_configured_keys_and_secret_environment_are_masked(tmp_path):
    import json

    from nanobot.config import load_config

    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(json.dumps({"providers": {"custom": {"apiKey": "plainkeywithoutshape"}}}))
    load_config(
        cfg_file,
        environ={
            "MY_SERVICE_TOKEN": "tok-lowercase-only",
            "SSH_AUTH_SOCK": "/tmp/agent.1",
            "EDITOR": "vim-editor-long",
        },
    )
    out = mask_secrets("a plainkeywithoutshape b tok-lowercase-only c vim-editor-long")
    assert out == "a [REDACTED] b [REDACTED] c vim-editor-long"


def test_find_secrets_names_what_it_masked():
    masked, found = find_secrets("here: " + SECRETS["anthropic"])
    assert found == ["Anthropic key"] and SECRETS["anthropic"] not in masked
    assert find_secrets("nothing secret here") == ("nothing secret here", [])


def test_tool_call_arguments_stay_valid_json_when_masked():
    import json

    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "write_file",
                    "arguments": json.dumps(
                        {"path": "k", "content": pem + " " + SECRETS["openai"]}
                    ),
                },
            }
        ],
    }
    out = mask_message(msg)
    args = json.loads(out["tool_calls"][0]["function"]["arguments"])
    assert "b3BlbnNzaC1" not in args["content"] and SECRETS["openai"] not in args["content"]
    assert (
        msg["tool_calls"][0]["function"]["arguments"]
        != out["tool_calls"][0]["function"]["arguments"]
    )


def test_a_long_text_masked_before_a_secret_was_known_is_masked_again_after(monkeypatch):
    from nanobot import secrets_mask

    monkeypatch.setattr(secrets_mask, "_known", set())
    monkeypatch.setattr(secrets_mask, "_known_re", None)
    value = "local-server-password-41"  # no known key shape: only the exact value gives it away
    prompt = (
        "## USER.md\n\n" + "The user works on the build scripts.\n" * 40 + f"db login: {value}\n"
    )
    assert mask_secrets(prompt) == prompt  # not a secret yet (and remembered as masked)
    assert mask_secrets(prompt) == prompt
    secrets_mask.remember_secrets([value])
    assert value not in mask_secrets(prompt) and REDACTED in mask_secrets(prompt)
    assert mask_secrets(prompt) == mask_secrets(prompt.replace(value, REDACTED))
