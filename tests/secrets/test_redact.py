"""One redaction for every display of a spec, an error or an event (e31_protocol.redact, issue 23)."""
import pytest
from e31_protocol.redact import redact_text, redact_value


@pytest.mark.parametrize("given,shown", [
    ("https://alice:pa55@host/x.tar", "https://***@host/x.tar"),
    ("s3://AKIA:secret@bucket/key", "s3://***@bucket/key"),
    ("https://token@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("data[0]: https://u:p@h.example/a: HTTP 403", "data[0]: https://***@h.example/a: HTTP 403"),
    ("https://b.s3.amazonaws.com/a?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc&X-Amz-Expires=3",
     "https://b.s3.amazonaws.com/a?X-Amz-Algorithm=AWS4&X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=3"),
    ("https://x.blob.core.windows.net/c/f?sv=2020&sig=Zm9v%3D", "https://x.blob.core.windows.net/c/f?sv=2020&sig=***"),
    ("https://h/f?Signature=abc&Key-Pair-Id=K1&Policy=p", "https://h/f?Signature=***&Key-Pair-Id=***&Policy=***"),
    ("https://h/f?x-amz-signature=abc", "https://h/f?x-amz-signature=***"),
    ("https://h/f?a=1&amp;token=abc", "https://h/f?a=1&amp;token=***"),
    ("https://h/f?GoogleAccessId=sa&X-Goog-Signature=ff", "https://h/f?GoogleAccessId=***&X-Goog-Signature=***"),
])
def test_credentials_in_urls_are_shown_as_stars(given, shown):
    assert redact_text(given) == shown


@pytest.mark.parametrize("text", [
    "command exited with code 1", "user@example.com wrote 3 files", "SEED=1 python train.py",
    "https://host/data.tar.gz?version=3", "https://host/path@v2/file", "",
])
def test_text_without_credentials_is_unchanged(text):
    assert redact_text(text) == text


def test_a_spec_is_redacted_in_every_string_and_keeps_its_shape():
    spec = {"name": "n", "work": {"command": "curl https://u:p@h/x", "secrets": ["HF_TOKEN"]},
            "data": [{"source": "https://u:p@h/y", "sha256": None, "extract": True}]}
    shown = redact_value(spec)
    assert shown == {"name": "n", "work": {"command": "curl https://***@h/x", "secrets": ["HF_TOKEN"]},
                     "data": [{"source": "https://***@h/y", "sha256": None, "extract": True}]}
    assert spec["data"][0]["source"] == "https://u:p@h/y"  # the stored spec is not changed


def test_a_password_holding_an_at_sign_and_a_percent_encoded_signature_name_are_masked_whole():
    from e31_protocol.redact import redact_text

    shown = redact_text("https://bob:p@ss@host/x?a=1&X%2DAmz%2DSignature=abc&b=2")
    assert shown == "https://***@host/x?a=1&X%2DAmz%2DSignature=***&b=2"
    assert "ss@" not in shown and "abc" not in shown
