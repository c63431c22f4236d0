"""An input's cache identity (e31_protocol.inputs, issue 23 item 1): who may be served a cached copy."""

import pytest
from e31_protocol.inputs import (
    canonical_source,
    display_source,
    input_identity,
    keyed_id,
    source_credentials,
)

H = "ab" * 32


def test_an_upload_is_scoped_by_its_owner_and_never_by_its_digest():
    alice = input_identity("upload:6C1F-aa", owner="ow1-alice")
    assert alice == input_identity("upload:6c1f-aa", owner="ow1-alice")  # one spelling of the id
    assert alice != input_identity("upload:6c1f-aa", owner="ow1-bob")
    assert alice != input_identity("upload:6c1f-bb", owner="ow1-alice")
    assert alice.startswith("in1-") and len(alice) == 44
    # the finding: bob names alice's digest with a source of his own: nothing in common
    assert input_identity("https://example.invalid/nothing.bin", owner="ow1-bob") != alice


def test_an_upload_without_a_scope_is_not_shared():
    assert input_identity("upload:6c1f", owner=None) is None
    assert input_identity("", owner="ow1-alice") is None


def test_a_project_scopes_an_upload_instead_of_its_owner():
    """The hook for issue 20: members of one project share its uploads' entries."""
    ours = input_identity("upload:6c1f", owner="ow1-alice", project="pr1-p")
    assert ours == input_identity("upload:6c1f", owner="ow1-bob", project="pr1-p")
    assert ours != input_identity("upload:6c1f", owner="ow1-alice")
    assert ours != input_identity("upload:6c1f", owner="ow1-alice", project="pr1-q")


def test_a_url_is_keyed_by_its_canonical_source_and_credentials_not_by_its_owner():
    public = input_identity("https://data.example.org/w.bin", owner="ow1-alice")
    assert public == input_identity("HTTPS://Data.Example.ORG:443/w.bin#part", owner="ow1-bob")  # anonymous: shared
    assert public != input_identity("https://data.example.org/w.bin", owner="ow1-bob", credentials_id="cr1-bob")
    assert (input_identity("s3://b/k", owner="a", credentials_id="cr1-x")
            == input_identity("s3://b/k", owner="b", credentials_id="cr1-x"))  # the same credentials: shared
    assert public != input_identity("https://data.example.org/w.bin?v=2", owner="ow1-alice")
    assert public != input_identity("http://data.example.org/w.bin", owner="ow1-alice")


@pytest.mark.parametrize("with_secret", [
    "https://alice:hunter2@data.example.org/w.bin",
    "https://data.example.org/w.bin?X-Amz-Signature=abc&X-Amz-Credential=AKIA",
    "https://storage.googleapis.com/b/w.bin?X-Goog-Signature=f00",
    "https://acct.blob.core.windows.net/c/w.bin?sv=1&sig=zzz",
])
def test_credentials_in_the_url_are_part_of_the_identity_and_never_of_its_display(with_secret):
    """A presigned URL's signature or userinfo reads with credentials: the same URL without them
    (anonymous) or with other ones is another identity, and no log or index shows them."""
    anonymous = input_identity(canonical_source(with_secret), owner="ow1-bob")
    assert input_identity(with_secret, owner="ow1-alice") != anonymous
    assert source_credentials(with_secret) and source_credentials(canonical_source(with_secret)) is None
    for secret in ("hunter2", "abc", "AKIA", "f00", "zzz"):
        assert secret not in canonical_source(with_secret) and secret not in display_source(with_secret)
    assert "***" in display_source(with_secret)


def test_canonical_sources_keep_path_and_query_as_written():
    assert canonical_source("https://H.example/a%2Fb?x=1&y=2") == "https://h.example/a%2Fb?x=1&y=2"
    assert canonical_source("https://h.example:8443") == "https://h.example:8443/"
    assert canonical_source("http://[::1]:80/x") == "http://[::1]/x"
    assert canonical_source("s3://bucket/key.bin") == "s3://bucket/key.bin"
    assert display_source("https://h.example/x?y=1") == "https://h.example/x?y=1"
    assert source_credentials("upload:6c1f") is None


def test_the_digest_is_not_part_of_the_identity():
    """``input_identity`` takes no sha256: a spec naming another digest names the same input."""
    with pytest.raises(TypeError):
        input_identity("upload:6c1f", owner="o", sha256=H)  # type: ignore[call-arg]


def test_keyed_ids_need_the_key_and_separate_purposes():
    assert keyed_id(b"k", "ow1", "user:1") == keyed_id(b"k", "ow1", "user:1")
    assert keyed_id(b"k", "ow1", "user:1") != keyed_id(b"other", "ow1", "user:1")
    assert keyed_id(b"k", "ow1", "x").removeprefix("ow1-") != keyed_id(b"k", "cr1", "x").removeprefix("cr1-")
    assert len(keyed_id(b"k", "cr1", b"\x00secret")) == 36
    with pytest.raises(ValueError, match="key"):
        keyed_id(b"", "ow1", "user:1")
