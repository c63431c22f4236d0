"""Staging: targets, checksums, extraction, uploads from the site, the cache."""

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from e31_agent.backoff import Backoff
from e31_agent.cache import InputCache, key_for
from e31_agent.client import ApiClient
from e31_agent.models import DataItem
from e31_agent.netguard import AddressPolicy
from e31_agent.staging import Stager, StagingAborted, StagingError
from e31_protocol.inputs import input_identity

from .fake_server import TOKEN, FakeServer


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    job = tmp_path / "jobs" / "1"
    job.mkdir(parents=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.csv").write_text("a,b\n1,2\n")
    return {"job": job, "src": src, "tmp": tmp_path / "tmp", "cache": tmp_path / "cache"}


def _stager(dirs, client=None, **kw) -> Stager:
    kw.setdefault("file_roots", [dirs["src"]])
    kw.setdefault("net_policy", AddressPolicy.parse(["127.0.0.1"]))  # the fake server's static files
    kw.setdefault("cache", InputCache(dirs["cache"]))
    return Stager(client=client, job_dir=dirs["job"], tmp_dir=dirs["tmp"], **kw)


def _tgz(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("target", "where"),
    [
        ("", "train.csv"),
        ("./", "train.csv"),
        ("data/", "data/train.csv"),
        ("data/renamed.csv", "data/renamed.csv"),
        ("existing", "existing/train.csv"),  # an existing dir: put inside
    ],
)
def test_targets(dirs, target, where):
    (dirs["job"] / "existing").mkdir()
    url = (dirs["src"] / "train.csv").as_uri()
    _stager(dirs).stage([DataItem(source=url, target=target)])
    assert (dirs["job"] / where).read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("target", ["../escape.csv", "/etc/x", "data/../../x"])
def test_targets_stay_in_the_job_dir(dirs, target):
    url = (dirs["src"] / "train.csv").as_uri()
    with pytest.raises(StagingError, match="target"):
        _stager(dirs).stage([DataItem(source=url, target=target)])


def test_a_link_in_the_job_dir_cannot_lead_a_target_out(dirs, tmp_path):
    (dirs["job"] / "out").symlink_to(tmp_path)
    url = (dirs["src"] / "train.csv").as_uri()
    with pytest.raises(StagingError, match="outside"):
        _stager(dirs).stage([DataItem(source=url, target="out/x.csv")])


def test_a_checksum_mismatch_fails_with_a_clear_message(dirs):
    url = (dirs["src"] / "train.csv").as_uri()
    with pytest.raises(StagingError, match="sha256 mismatch: expected 0{64}, got [0-9a-f]{64}"):
        _stager(dirs).stage([DataItem(source=url, sha256="0" * 64)])
    assert not (dirs["job"] / "train.csv").exists()


def test_a_matching_checksum_stages_and_caches(dirs):
    data = (dirs["src"] / "train.csv").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    url = (dirs["src"] / "train.csv").as_uri()
    _stager(dirs).stage([DataItem(source=url, sha256=sha)])
    key = key_for(input_identity(url, owner=None), source=url, sha256=sha, info=None)
    assert (dirs["cache"] / "objects" / key).read_bytes() == data
    (dirs["src"] / "train.csv").unlink()  # the second job is served from the cache
    (dirs["job"] / "train.csv").unlink()
    _stager(dirs).stage([DataItem(source=url, sha256=sha, target="again.csv")])
    assert (dirs["job"] / "again.csv").read_bytes() == data


def test_extract_unpacks_into_the_target(dirs):
    (dirs["src"] / "d.tar.gz").write_bytes(_tgz({"set/a.txt": b"A", "b.txt": b"B"}))
    url = (dirs["src"] / "d.tar.gz").as_uri()
    _stager(dirs).stage([DataItem(source=url, target="data/", extract=True)])
    assert (dirs["job"] / "data" / "set" / "a.txt").read_bytes() == b"A"
    assert (dirs["job"] / "data" / "b.txt").read_bytes() == b"B"


def test_extract_refuses_entries_that_leave(dirs, tmp_path):
    (dirs["src"] / "bad.tar.gz").write_bytes(_tgz({"../../evil.txt": b"x"}))
    url = (dirs["src"] / "bad.tar.gz").as_uri()
    with pytest.raises(StagingError, match=r"'\.\.'"):
        _stager(dirs).stage([DataItem(source=url, target="data/", extract=True)])
    assert not (tmp_path / "evil.txt").exists()


def test_a_missing_source_fails_staging(dirs):
    url = (dirs["src"] / "nope.csv").as_uri()
    with pytest.raises(StagingError, match="not found"):
        _stager(dirs).stage([DataItem(source=url)])


def test_unknown_schemes_are_refused(dirs):
    with pytest.raises(StagingError, match="unsupported"):
        _stager(dirs).stage([DataItem(source="ftp://host/x")])


def test_uploads_come_from_the_site_with_the_node_token(dirs):
    payload = _tgz({"imgs/1.png": b"png"})
    with FakeServer() as server:
        server.state.uploads["u-42"] = ("images.tar.gz", payload)
        server.state.uploads["u-43"] = ("notes.txt", b"hello")
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        seen = []
        _stager(dirs, client, progress=lambda done, total: seen.append((done, total))).stage(
            [
                DataItem(source="upload:u-42", target="data/", extract=True),
                DataItem(source="upload:u-43", target="docs/"),
            ]
        )
        client.close()
        assert (dirs["job"] / "data" / "imgs" / "1.png").read_bytes() == b"png"
        assert (dirs["job"] / "docs" / "notes.txt").read_bytes() == b"hello"
        assert seen[-1] == (len(payload) + 5, len(payload) + 5)


def test_a_missing_upload_fails_staging(dirs):
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        with pytest.raises(StagingError, match="HTTP 404"):
            _stager(dirs, client).stage([DataItem(source="upload:nope")])
        client.close()


def test_staging_stops_when_asked(dirs):
    url = (dirs["src"] / "train.csv").as_uri()
    with pytest.raises(StagingAborted):
        _stager(dirs, should_stop=lambda: True).stage([DataItem(source=url)])


def test_web_sources_go_through_fsspec(dirs):
    payload = b"x" * 300_000
    with FakeServer() as server:
        server.state.static["big.bin"] = payload
        _stager(dirs).stage(
            [
                DataItem(
                    source=f"{server.url}/static/big.bin",
                    target="in/",
                    sha256=hashlib.sha256(payload).hexdigest(),
                )
            ]
        )
    assert (dirs["job"] / "in" / "big.bin").read_bytes() == payload


def test_file_sources_outside_the_allowed_roots_are_refused(dirs, tmp_path):
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("no")
    with pytest.raises(StagingError, match="file:// is only allowed"):
        _stager(dirs).stage([DataItem(source=secret.as_uri())])
    with pytest.raises(StagingError, match="file:// is only allowed"):
        _stager(dirs, file_roots=[]).stage([DataItem(source=(dirs["src"] / "train.csv").as_uri())])
    (dirs["src"] / "link.txt").symlink_to(secret)  # a link under the root that leads out
    with pytest.raises(StagingError, match="file:// is only allowed"):
        _stager(dirs).stage([DataItem(source=(dirs["src"] / "link.txt").as_uri())])
    assert not (dirs["job"] / "secret.txt").exists() and not (dirs["job"] / "link.txt").exists()


def test_a_url_with_an_etag_is_cached_and_the_second_job_downloads_nothing(dirs):
    payload = b"y" * 200_000
    with FakeServer() as server:
        server.state.static["set.bin"] = payload
        url = f"{server.url}/static/set.bin"
        first = _stager(dirs)
        first.stage([DataItem(source=url, target="in/")])
        assert (first.fetched, first.cached) == (len(payload), 0)
        (dirs["job"] / "in" / "set.bin").write_bytes(b"the job changes its copy")
        second = _stager(dirs)
        second.stage([DataItem(source=url, target="again/")])
        assert (second.fetched, second.cached) == (0, len(payload))
        assert (dirs["job"] / "again" / "set.bin").read_bytes() == payload
        server.state.static["set.bin"] = b"z" * 10  # a new version: a new key, downloaded again
        third = _stager(dirs)
        third.stage([DataItem(source=url, target="third/")])
        assert third.fetched == 10 and (dirs["job"] / "third" / "set.bin").read_bytes() == b"z" * 10


def test_prefetch_fills_the_cache_and_staging_then_links_from_it(dirs):
    payload = b"u" * 50_000
    with FakeServer() as server:
        server.state.uploads["u-9"] = ("frames.bin", payload)
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        cache = InputCache(dirs["cache"])
        pre = Stager(client=client, job_dir=None, tmp_dir=dirs["tmp"], cache=cache)
        assert pre.prefetch([DataItem(source="upload:u-9", owner="ow1-o")]) == (len(payload), len(payload))
        assert not any(dirs["job"].iterdir())
        stager = _stager(dirs, client, cache=cache)
        stager.stage([DataItem(source="upload:u-9", target="data/", owner="ow1-o")])
        client.close()
        assert (stager.fetched, stager.cached) == (0, len(payload))
        assert (dirs["job"] / "data" / "frames.bin").read_bytes() == payload
        assert [c for c in server.state.calls if c[1].startswith("/api/v1/agent/uploads/")] == [
            ("GET", "/api/v1/agent/uploads/u-9/")
        ]
