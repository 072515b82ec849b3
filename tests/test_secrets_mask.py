"""Secret masking: obvious credentials go, prose, code and URLs stay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot.secrets_mask import REDACTED, mask_secrets

SECRETS = {
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdefgh",
    "openai": "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
    "openai-legacy": "sk-0123456789abcdefghijABCDEFGHIJ0123456789abcd",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJklmnop",
    "github-pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "google": "AIzaSyA-0123456789abcdefghijklmnopqrstu",
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


@pytest.mark.parametrize("text, secret", [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjEyM30.abc123", "eyJhbGciOiJIUzI1NiJ9"),
    ("api_key=abcd1234efgh5678", "abcd1234efgh5678"),
    ('{"apiKey": "hunter-two"}', "hunter-two"),
    ("export OPENAI_API_KEY='abc'", "'abc'"),
    ("password = hunter2", "hunter2"),
    ("DB_PASSWORD: s3cretpass", "s3cretpass"),
    ("https://bob:pa55word@example.com/repo.git", "pa55word"),
    ("GET /v1/data?access_token=zz9900aa&x=1", "zz9900aa"),
])
def test_assignments_and_headers_are_masked(text, secret):
    out = mask_secrets(text)
    assert secret not in out, out
    assert REDACTED in out


def test_pem_private_key_block_is_masked_whole():
    pem = ("before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234\nabcdEFGH==\n"
           "-----END RSA PRIVATE KEY-----\nafter")
    out = mask_secrets(pem)
    assert "MIIEow" not in out and "abcdEFGH" not in out
    assert out.startswith("before\n-----BEGIN RSA PRIVATE KEY-----") and out.endswith("after")


def test_a_truncated_pem_block_is_masked_to_the_end():
    out = mask_secrets("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert "MIIEvQ" not in out


@pytest.mark.parametrize("text", [
    "The user prefers dark mode and lives in Berlin; meeting moved to 2026-03-04 at 14:00.",
    "def connect(api_key: str, password: str | None = None):\n    return Client(api_key=api_key)",
    "token = self.token\nmax_tokens=4096\ncontext_window_tokens: 65536",
    "See https://github.com/HKUDS/nanobot/blob/main/README.md and http://localhost:8080/a@b",
    "Use scikit-learn (sk-learn) and task-runner-configuration-for-things",
    "git clone git@github.com:org/repo.git",
    "The bearer of bad news arrived. Token: 42.",
    "ask-anthropic-about-the-long-hyphenated-identifier-name",
])
def test_prose_code_and_urls_are_left_alone(text):
    assert mask_secrets(text) == text


def test_masking_twice_changes_nothing_more():
    text = " ".join(SECRETS.values()) + ' api_key="abc123" password=hunter2 Bearer abc123def456ghi789'
    once = mask_secrets(text)
    assert mask_secrets(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_mask_is_idempotent_and_total_on_any_text(text):
    once = mask_secrets(text)
    assert mask_secrets(once) == once
