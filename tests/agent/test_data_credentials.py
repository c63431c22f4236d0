"""``data[i].credentials`` (issue 23): an s3:// source is read with its owner's storage options, for that
source only; without them anonymously, never with the node's own identity unless the operator names
the bucket (``E31_DATA_NODE_CREDENTIALS_FOR``). Against a real S3-compatible server (moto, tests/s3.py)."""

import json
import uuid

import boto3
import pytest
from e31_agent.cache import InputCache
from e31_agent.models import DataItem
from e31_agent.staging import Stager, StagingError

pytest.importorskip("s3fs", reason="s3:// inputs need the agent's `cloud` extra (s3fs)")

PAYLOAD = b"private rows\n" * 100
NODE_KEY, NODE_SECRET = "node-identity-key", "node-identity-secret"


@pytest.fixture
def private_object(s3_endpoint, monkeypatch):
    """A private bucket holding ``data.bin``; the node's own identity (environment) can read it."""
    bucket = f"e31-priv-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                      aws_access_key_id="owner-key", aws_secret_access_key="owner-secret")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="data.bin", Body=PAYLOAD)
    # the node's identity, as an instance role or ~/.aws would give it; anonymous reads must not use it
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", NODE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", NODE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.delenv("E31_DATA_NODE_CREDENTIALS_FOR", raising=False)
    return f"s3://{bucket}/data.bin"


def _stager(tmp_path, **kw) -> Stager:
    job = tmp_path / "job"
    job.mkdir(parents=True, exist_ok=True)
    return Stager(client=None, job_dir=job, tmp_dir=tmp_path / "tmp", cache=InputCache(tmp_path / "cache"), **kw)


def test_a_private_bucket_is_read_with_the_named_credentials(tmp_path, private_object, s3_endpoint):
    creds = json.dumps({"key": "owner-key", "secret": "owner-secret", "endpoint_url": s3_endpoint})
    stager = _stager(tmp_path, credentials={"MY_BUCKET": creds})
    stager.stage([DataItem(source=private_object, target="in/", credentials="MY_BUCKET")])
    assert (tmp_path / "job" / "in" / "data.bin").read_bytes() == PAYLOAD
    # read with one tenant's credentials: not kept in the node cache for others (until it keys by them)
    assert not any(p.is_file() and p.read_bytes() == PAYLOAD for p in (tmp_path / "cache").rglob("*"))


def test_without_credentials_the_read_is_anonymous_and_fails_naming_data_0(tmp_path, private_object):
    with pytest.raises(StagingError) as err:
        _stager(tmp_path).stage([DataItem(source=private_object, target="in/")])
    message = str(err.value)
    assert message.startswith("data[0]: ") and "read anonymously" in message, message
    assert not (tmp_path / "job" / "in" / "data.bin").exists()


def test_credentials_are_used_for_their_source_only(tmp_path, private_object, s3_endpoint):
    creds = json.dumps({"key": "owner-key", "secret": "owner-secret", "endpoint_url": s3_endpoint})
    stager = _stager(tmp_path, credentials={"MY_BUCKET": creds})
    with pytest.raises(StagingError) as err:
        stager.stage([DataItem(source=private_object, target="a/", credentials="MY_BUCKET"),
                      DataItem(source=private_object, target="b.bin")])
    assert str(err.value).startswith("data[1]: ")


def test_a_bucket_the_operator_names_is_read_with_the_nodes_identity(tmp_path, private_object, monkeypatch):
    bucket = private_object.rsplit("/", 1)[0]
    monkeypatch.setenv("E31_DATA_NODE_CREDENTIALS_FOR", f"s3://other-bucket,{bucket}")
    _stager(tmp_path).stage([DataItem(source=private_object, target="in/")])
    assert (tmp_path / "job" / "in" / "data.bin").read_bytes() == PAYLOAD
    monkeypatch.setenv("E31_DATA_NODE_CREDENTIALS_FOR", f"{bucket}-not")  # a prefix is a whole bucket name
    with pytest.raises(StagingError):
        _stager(tmp_path / "again").stage([DataItem(source=private_object, target="in/")])


def test_credentials_not_sent_to_the_node_fail_naming_the_input(tmp_path, private_object):
    with pytest.raises(StagingError) as err:
        _stager(tmp_path).stage([DataItem(source=private_object, credentials="MISSING")])
    assert str(err.value).startswith("data[0]: ") and "MISSING" in str(err.value)


@pytest.mark.parametrize("endpoint", ["http://169.254.169.254", "https://169.254.169.254", "https://127.0.0.1:9",
                                      "https://10.0.0.1", "file:///etc/passwd", "https://[::1]:443"])
def test_an_endpoint_on_a_private_address_is_refused_a_request_forgery_from_the_node(tmp_path, endpoint, monkeypatch):
    monkeypatch.delenv("E31_DATA_ENDPOINTS_ALLOWED", raising=False)
    creds = json.dumps({"key": "k", "secret": "s", "endpoint_url": endpoint})
    with pytest.raises(StagingError) as err:
        _stager(tmp_path, credentials={"EVIL": creds}).stage(
            [DataItem(source="s3://latest/meta-data/iam/security-credentials/role", target="x", credentials="EVIL")])
    assert str(err.value).startswith("data[0]: ") and "endpoint_url" in str(err.value)
    assert creds not in str(err.value)


def test_a_gs_token_uri_other_than_googles_is_refused(tmp_path):
    creds = json.dumps({"type": "service_account", "token_uri": "http://169.254.169.254/"})
    with pytest.raises(StagingError) as err:
        _stager(tmp_path, credentials={"GS": creds}).stage([DataItem(source="gs://b/o", target="x", credentials="GS")])
    assert "token_uri" in str(err.value)
