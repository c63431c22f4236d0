"""The node's input cache: keys, size cap with LRU eviction, pins, an index that survives restarts."""

import json
import os
import threading
import time
from pathlib import Path

import pytest
from e31_agent.cache import InputCache, key_for, link_or_copy


def _file(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(b"x" * size)
    return path


def test_keys_come_from_the_checksum_the_upload_or_the_version_and_size():
    assert key_for("https://h/a", sha256="AB" * 32, info=None) == "sha256-" + "ab" * 32
    up = key_for("upload:7", sha256=None, info=None, server="http://s")
    assert up.startswith("upload-") and up != key_for("upload:7", sha256=None, info=None, server="http://t")
    v1 = key_for("https://h/a", sha256=None, info={"size": 3, "ETag": '"1"'})
    v2 = key_for("https://h/a", sha256=None, info={"size": 3, "ETag": '"2"'})
    assert v1.startswith("url-") and v1 != v2
    assert v1 != key_for("https://h/a", sha256=None, info={"size": 4, "ETag": '"1"'})


@pytest.mark.parametrize("info", [None, {"size": 3}, {"ETag": "x"}, {"type": "directory", "size": 0, "ETag": "x"}])
def test_a_source_without_a_version_is_not_cached(info):
    assert key_for("https://h/a", sha256=None, info=info) is None


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
    """Issue 14 item 5: the identities sent with each heartbeat (checksum and source)."""
    cache = InputCache(tmp_path / "cache", max_bytes=10_000)
    cache.add("sha256-" + "ab" * 32, _file(tmp_path, "a", 10), name="a", sha256="AB" * 32, source="https://h/a")
    time.sleep(0.01)
    cache.add("upload-1", _file(tmp_path, "b", 10), name="b", sha256=None, source="upload:7")
    assert cache.identities() == ["upload:7", "sha256-" + "ab" * 32, "https://h/a"]
    assert cache.identities(limit=1) == ["upload:7"]
    again = InputCache(tmp_path / "cache", max_bytes=10_000)  # the source survives a restart
    assert set(again.identities()) == {"upload:7", "sha256-" + "ab" * 32, "https://h/a"}


def test_an_index_of_an_older_agent_without_sources_still_loads(tmp_path):
    cache = InputCache(tmp_path / "cache", max_bytes=10_000)
    cache.add("k", _file(tmp_path, "a", 10), name="a", sha256=None, source="upload:7")
    index = tmp_path / "cache" / "index.json"
    raw = json.loads(index.read_text())
    del raw["entries"]["k"]["source"]
    index.write_text(json.dumps(raw))
    older = InputCache(tmp_path / "cache", max_bytes=10_000)
    assert "k" in older and older.identities() == []
