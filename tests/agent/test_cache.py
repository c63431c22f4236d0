"""The node's input cache: keys, size cap with LRU eviction, pins, an index that survives restarts."""

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest
from e31_agent.backoff import Backoff
from e31_agent.cache import InputCache, key_for, link_or_copy
from e31_agent.client import ApiClient
from e31_agent.models import DataItem
from e31_agent.netguard import AddressPolicy
from e31_agent.staging import Stager, StagingError
from e31_protocol.inputs import input_identity

from .fake_server import TOKEN, FakeServer

H = "ab" * 32


def _file(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(b"x" * size)
    return path


def test_keys_come_from_the_identity_with_the_checksum_the_upload_or_the_version_and_size():
    url = input_identity("https://h/a", owner=None)
    by_sha = key_for(url, source="https://h/a", sha256="AB" * 32, info=None)
    assert by_sha.startswith("c2-") and by_sha == key_for(url, source="https://h/a", sha256="ab" * 32, info=None)
    up = key_for(input_identity("upload:7", owner="ow1-a"), source="upload:7", sha256=None, info=None, server="http://s")
    assert up != key_for(input_identity("upload:7", owner="ow1-a"), source="upload:7", sha256=None, info=None,
                         server="http://t")
    v1 = key_for(url, source="https://h/a", sha256=None, info={"size": 3, "ETag": '"1"'})
    v2 = key_for(url, source="https://h/a", sha256=None, info={"size": 3, "ETag": '"2"'})
    assert v1.startswith("c2-") and v1 != v2
    assert v1 != key_for(url, source="https://h/a", sha256=None, info={"size": 4, "ETag": '"1"'})


def test_a_digest_names_no_entry_of_another_identity():
    """Issue 23 finding 1: the same sha256 under two identities is two keys; none without an identity."""
    alice = input_identity("upload:secret", owner="ow1-alice")
    bob = input_identity("https://example.invalid/nothing.bin", owner="ow1-bob")
    assert (key_for(alice, source="upload:secret", sha256=H, info=None)
            != key_for(bob, source="https://example.invalid/nothing.bin", sha256=H, info=None))
    assert key_for(None, source="upload:secret", sha256=H, info=None) is None
    assert key_for(input_identity("upload:secret", owner="ow1-bob"), source="upload:secret", sha256=H,
                   info=None) != key_for(alice, source="upload:secret", sha256=H, info=None)


@pytest.mark.parametrize("info", [None, {"size": 3}, {"ETag": "x"}, {"type": "directory", "size": 0, "ETag": "x"}])
def test_a_source_without_a_version_is_not_cached(info):
    assert key_for(input_identity("https://h/a", owner=None), source="https://h/a", sha256=None, info=info) is None


def test_it_evicts_the_least_recently_used_to_stay_under_the_cap(tmp_path):
    cache = InputCache(tmp_path / "cache", max_bytes=250)
    for name in "abc":
        cache.add(name, _file(tmp_path, name, 100), name=name, sha256=None)
        time.sleep(0.01)
    assert "a" not in cache and {"b", "c"} <= {e.key for e in cache.entries()}
    cache.get("b")  # b is now the most recent
    cache.add("d", _file(tmp_path, "d", 100), name="d", sha256=None)
    assert "c" not in cache and "b" in cache and "d" in cache
    assert cache.total_bytes <= 250
    assert not (tmp_path / "cache" / "objects" / "a").exists()


def test_pinned_entries_are_never_evicted(tmp_path):
    cache = InputCache(tmp_path / "cache", max_bytes=250)
    cache.add("a", _file(tmp_path, "a", 100), name="a", sha256=None)
    cache.add("b", _file(tmp_path, "b", 100), name="b", sha256=None)
    with cache.pinned(["a", "b"]):
        assert cache.add("c", _file(tmp_path, "c", 100), name="c", sha256=None) is None
        assert (tmp_path / "c").exists()  # left to the caller
    assert cache.add("c", tmp_path / "c", name="c", sha256=None) is not None
    assert "a" not in cache


def test_a_file_larger_than_the_cap_is_not_kept(tmp_path):
    cache = InputCache(tmp_path / "cache", max_bytes=50)
    assert cache.add("big", _file(tmp_path, "big", 100), name="big", sha256=None) is None
    assert cache.total_bytes == 0


def test_the_index_survives_a_restart_and_strays_are_swept(tmp_path):
    root = tmp_path / "cache"
    cache = InputCache(root, max_bytes=1000)
    path = cache.add("a", _file(tmp_path, "a", 10), name="a.csv", sha256="f" * 64)
    assert oct(path.stat().st_mode & 0o777) == "0o444"
    (root / "objects" / "half-download").write_bytes(b"?")
    (root / "sha256-old-layout").write_bytes(b"?")
    again = InputCache(root, max_bytes=1000)
    path, entry = again.get("a")
    assert entry.name == "a.csv" and entry.sha256 == "f" * 64 and path.read_bytes() == b"x" * 10
    assert sorted(p.name for p in root.iterdir()) == ["index.json", "objects"]
    assert [p.name for p in (root / "objects").iterdir()] == ["a"]
    assert json.loads((root / "index.json").read_text())["entries"]["a"]["size"] == 10


def test_a_restart_with_a_smaller_cap_evicts_down_to_it(tmp_path):
    root = tmp_path / "cache"
    cache = InputCache(root, max_bytes=1000)
    for name in "ab":
        cache.add(name, _file(tmp_path, name, 100), name=name, sha256=None)
        time.sleep(0.01)
    assert [e.key for e in InputCache(root, max_bytes=150).entries()] == ["b"]


def test_a_damaged_entry_is_dropped(tmp_path):
    cache = InputCache(tmp_path / "cache")
    path = cache.add("a", _file(tmp_path, "a", 10), name="a", sha256=None)
    os.chmod(path, 0o644)
    path.write_bytes(b"short")
    assert cache.get("a") is None and "a" not in cache


def test_an_unreadable_index_starts_empty(tmp_path):
    root = tmp_path / "cache"
    (root / "objects").mkdir(parents=True)
    (root / "index.json").write_text("{not json")
    assert InputCache(root).entries() == []


def test_one_filler_at_a_time_per_key(tmp_path):
    cache = InputCache(tmp_path / "cache")
    order = []

    def fill(tag):
        with cache.filling("k"):
            order.append(f"{tag}-in")
            time.sleep(0.05)
            order.append(f"{tag}-out")

    threads = [threading.Thread(target=fill, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order[0][0] == order[1][0] and order[2][0] == order[3][0]


def test_a_copy_in_the_job_dir_cannot_change_the_cache(tmp_path):
    cache = InputCache(tmp_path / "cache")
    src = cache.add("a", _file(tmp_path, "a", 10), name="a", sha256=None)
    dest = tmp_path / "job-a"
    how = link_or_copy(src, dest, hardlink_ok=False)
    assert how in ("reflink", "copy")
    dest.write_bytes(b"changed by the job")
    assert src.read_bytes() == b"x" * 10
    assert link_or_copy(src, tmp_path / "job-b", hardlink_ok=True) in ("reflink", "hardlink")


def test_file_roots_must_be_existing_directories(tmp_path):
    from e31_agent.node_inputs import FileRootError, check_file_roots

    (tmp_path / "data").mkdir()
    assert check_file_roots([tmp_path / "data"]) == (tmp_path / "data",)
    with pytest.raises(FileRootError, match="not an existing directory"):
        check_file_roots([tmp_path / "missing"])


def test_the_cli_takes_the_cache_cap_and_file_roots(tmp_path):
    from e31_agent.cli import parse_args

    (tmp_path / "data").mkdir()
    args = parse_args(["--server", "http://s", "--token", "t", "--cache-max-bytes", "1000",
                       "--allow-file-root", str(tmp_path / "data")])
    assert args.cache_max_bytes == 1000 and args.allow_file_root == [tmp_path / "data"]
    with pytest.raises(SystemExit):
        parse_args(["--server", "http://s", "--token", "t", "--allow-file-root", str(tmp_path / "nope")])


def test_it_names_what_it_holds_for_the_server_most_recent_first(tmp_path):
    """Issue 14 item 5, issue 23: the identities sent with each heartbeat, each once; no digest or source."""
    cache = InputCache(tmp_path / "cache", max_bytes=10_000)
    url, upload = input_identity("https://h/a", owner=None), input_identity("upload:7", owner="ow1-a")
    cache.add("k1", _file(tmp_path, "a", 10), name="a", sha256="AB" * 32, source="https://h/a", identity=url)
    time.sleep(0.01)
    cache.add("k2", _file(tmp_path, "b", 10), name="b", sha256=None, source="upload:7", identity=upload)
    time.sleep(0.01)
    cache.add("k3", _file(tmp_path, "c", 10), name="c", sha256=None, source="https://h/a", identity=url)
    assert cache.identities() == [url, upload]
    assert cache.identities(limit=1) == [url]
    again = InputCache(tmp_path / "cache", max_bytes=10_000)  # the identity survives a restart
    assert set(again.identities()) == {upload, url}
    assert not any(i.startswith("sha256-") or "h/a" in i or "upload" in i for i in again.identities())


def test_an_index_of_an_older_agent_without_sources_still_loads(tmp_path):
    cache = InputCache(tmp_path / "cache", max_bytes=10_000)
    cache.add("k", _file(tmp_path, "a", 10), name="a", sha256=None, source="upload:7")
    index = tmp_path / "cache" / "index.json"
    raw = json.loads(index.read_text())
    del raw["entries"]["k"]["source"]
    index.write_text(json.dumps(raw))
    older = InputCache(tmp_path / "cache", max_bytes=10_000)
    assert "k" in older and older.identities() == []


# -- who may be served an entry (issue 23 item 1) -------------------------------------------

ALICE, BOB = "ow1-alice", "ow1-bob"


def _stager(tmp_path: Path, cache: InputCache, client=None, job: str = "job") -> Stager:
    (tmp_path / job).mkdir(exist_ok=True)
    return Stager(client=client, job_dir=tmp_path / job, tmp_dir=tmp_path / "tmp", cache=cache,
                  net_policy=AddressPolicy.parse(["127.0.0.1"]))


def _source_calls(server: FakeServer) -> list[tuple[str, str]]:
    return [c for c in server.state.calls if c[1].startswith(("/static/", "/api/v1/agent/uploads/"))]


def test_a_digest_never_unlocks_another_tenants_upload(tmp_path):
    """The finding replayed on the agent: alice's upload is cached; bob names its sha256 with a source
    of his own. His job fetches his source (and fails on it, naming data[0]); it never sees her bytes."""
    secret = os.urandom(100_000)
    digest = hashlib.sha256(secret).hexdigest()
    cache = InputCache(tmp_path / "cache")
    with FakeServer() as server:
        server.state.uploads["u-alice"] = ("alice-secret.bin", secret)
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        _stager(tmp_path, cache, client, "alice").stage(
            [DataItem(source="upload:u-alice", sha256=digest, target="in/", owner=ALICE)])
        assert (tmp_path / "alice" / "in" / "alice-secret.bin").read_bytes() == secret
        bob = _stager(tmp_path, cache, client, "bob")
        with pytest.raises(StagingError, match=r"^data\[0\]: .*nothing\.bin: not found") as failed:
            bob.stage([DataItem(source=f"{server.url}/static/nothing.bin", sha256=digest, target="x.bin",
                                owner=BOB)])
        # even naming alice's upload itself is another scope: a miss, and the site decides whether he may
        # fetch it (the real one answers 404, apps.agent_api.selectors.node_may_fetch_upload; this fake serves all)
        bob2 = _stager(tmp_path, cache, client, "bob2")
        bob2.stage([DataItem(source="upload:u-alice", sha256=digest, target="x.bin", owner=BOB)])
        client.close()
        assert len([c for c in _source_calls(server) if "u-alice" in c[1]]) == 2
    assert (bob.cached, bob.done) == (0, 0) and "alice" not in str(failed.value)
    assert not (tmp_path / "bob" / "x.bin").exists()
    assert (bob2.cached, bob2.fetched) == (0, len(secret))


def test_a_foreign_entry_is_a_plain_miss(tmp_path):
    """Staging reveals nothing across tenants: with alice's entry in the cache, bob's staging asks
    the same source, the same way, and fails the same as on an empty cache."""
    secret = b"s" * 50_000
    digest = hashlib.sha256(secret).hexdigest()

    def bobs_try(cache: InputCache, server: FakeServer) -> tuple[str, list]:
        server.state.calls.clear()
        with pytest.raises(StagingError) as failed:
            _stager(tmp_path, cache, job="bob").stage(
                [DataItem(source=f"{server.url}/static/nothing.bin", sha256=digest, owner=BOB)])
        return str(failed.value), _source_calls(server)

    with FakeServer() as server:
        server.state.uploads["u-alice"] = ("a.bin", secret)
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        full = InputCache(tmp_path / "full")
        _stager(tmp_path, full, client, "alice").stage([DataItem(source="upload:u-alice", sha256=digest, owner=ALICE)])
        client.close()
        assert bobs_try(full, server) == bobs_try(InputCache(tmp_path / "empty"), server)
        assert bobs_try(full, server)[1]  # he asked his own source


def test_the_same_owner_is_served_from_the_cache_again(tmp_path):
    payload = os.urandom(60_000)
    cache = InputCache(tmp_path / "cache")
    with FakeServer() as server:
        server.state.uploads["u-1"] = ("frames.bin", payload)
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        first = _stager(tmp_path, cache, client, "one")
        first.stage([DataItem(source="upload:u-1", owner=ALICE)])
        second = _stager(tmp_path, cache, client, "two")
        second.stage([DataItem(source="upload:u-1", target="again/", owner=ALICE)])
        client.close()
        assert (first.fetched, second.fetched, second.cached) == (len(payload), 0, len(payload))
        assert (tmp_path / "two" / "again" / "frames.bin").read_bytes() == payload
        assert len([c for c in _source_calls(server) if "u-1" in c[1]]) == 1


def test_an_upload_without_an_owner_is_not_cached(tmp_path):
    """An older server sends no input_scope: its uploads are fetched each time, never shared."""
    cache = InputCache(tmp_path / "cache")
    with FakeServer() as server:
        server.state.uploads["u-1"] = ("f.bin", b"f" * 1000)
        client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01))
        for job in ("one", "two"):
            stager = _stager(tmp_path, cache, client, job)
            stager.stage([DataItem(source="upload:u-1")])
            assert (stager.fetched, stager.cached) == (1000, 0)
        client.close()
    assert cache.entries() == []


def test_two_tenants_share_a_public_url_read_anonymously_but_not_one_read_with_credentials(tmp_path):
    """Anonymous, same canonical source: either could fetch it from this node, so one entry serves
    both (SPEC §6). Read with credentials (here in the URL), it is the credentials' entry alone."""
    payload = os.urandom(40_000)
    cache = InputCache(tmp_path / "cache")
    with FakeServer() as server:
        server.state.static["public.bin"] = payload
        url = f"{server.url}/static/public.bin"
        _stager(tmp_path, cache, job="alice").stage([DataItem(source=url, owner=ALICE)])
        bob = _stager(tmp_path, cache, job="bob")
        bob.stage([DataItem(source=url.replace("http://", "HTTP://") + "#x", owner=BOB)])
        assert (bob.fetched, bob.cached) == (0, len(payload))
        signed = _stager(tmp_path, cache, job="signed")
        signed.stage([DataItem(source=url + "?X-Amz-Signature=s3cr3t", owner=ALICE)])
        assert (signed.fetched, signed.cached) == (len(payload), 0)
        other = _stager(tmp_path, cache, job="other")
        other.stage([DataItem(source=url, owner=BOB, credentials_id="cr1-bob")])
        assert (other.fetched, other.cached) == (len(payload), 0)
    index = (tmp_path / "cache" / "index.json").read_text()
    assert "s3cr3t" not in index and "X-Amz-Signature=***" in index


def test_a_digest_keyed_cache_of_an_older_agent_is_dropped_at_start(tmp_path):
    """Index version 1 keyed entries by sha256 alone: none of them is reachable after an upgrade."""
    root = tmp_path / "cache"
    (root / "objects").mkdir(parents=True)
    (root / "objects" / f"sha256-{H}").write_bytes(b"alice's bytes")
    (root / "index.json").write_text(json.dumps({"version": 1, "entries": {f"sha256-{H}": {
        "size": 13, "name": "alice-secret.bin", "sha256": H, "last_used": time.time(), "source": "upload:a"}}}))
    cache = InputCache(root)
    assert cache.entries() == [] and cache.identities() == [] and list((root / "objects").iterdir()) == []
    assert json.loads((root / "index.json").read_text()) == {"version": 2, "entries": {}}


def test_the_scope_comes_with_the_assignment_and_the_prestage_offer():
    """Protocol v4: ``input_scope`` gives each data item its owner and credentials."""
    from e31_agent.models import Assignment, PrestageOffer

    scope = {"owner": ALICE, "credentials": [None, "cr1-x"]}
    data = [{"source": "upload:u-1", "target": ""}, {"source": "s3://b/k", "target": ""}]
    job = Assignment.from_json({"job_id": 1, "attempt": 1, "lease_id": 1, "gpus": [], "time_limit_s": 60,
                                "grace_s": 1, "env": {}, "spec": {"work": {"command": "true"}, "data": data},
                                "input_scope": scope})
    offer = PrestageOffer.from_json({"job_id": 1, "new": True, "data": data, "input_scope": scope})
    assert [d.identity for d in job.spec.data] == [d.identity for d in offer.data] == [
        input_identity("upload:u-1", owner=ALICE), input_identity("s3://b/k", owner=ALICE, credentials_id="cr1-x")]
    older = PrestageOffer.from_json({"job_id": 1, "new": True, "data": data})  # a v3 server
    assert [d.identity for d in older.data] == [None, input_identity("s3://b/k", owner=None)]
