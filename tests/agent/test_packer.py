"""Packer: globs, manifest checksums; links never followed, special files skipped, sizes capped."""

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest
from e31_agent.packer import PackError, collect, glob_regex, pack


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    job = tmp_path / "jobs" / "12"
    (job / "checkpoints" / "epoch1").mkdir(parents=True)
    (job / "checkpoints" / "epoch1" / "model.pt").write_bytes(b"weights" * 100)
    (job / "checkpoints" / "last.pt").write_bytes(b"last")
    (job / "metrics.json").write_text('{"acc": 0.9}')
    (job / "scratch.tmp").write_text("not declared")
    (job / "logs").mkdir()
    (job / "logs" / "a.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink("/etc/passwd", job / "checkpoints" / "passwd")
    os.symlink(outside, job / "checkpoints" / "outdir")
    os.symlink(outside / "secret.txt", job / "checkpoints" / "secret.txt")
    os.symlink("../metrics.json", job / "checkpoints" / "metrics-link.json")  # inside: fine
    return job


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("checkpoints/**", "checkpoints/a/b.pt", True),
        ("checkpoints/**", "checkpointsX/a.pt", False),
        ("**/*.json", "metrics.json", True),
        ("**/*.json", "a/b/c.json", True),
        ("*.json", "a/c.json", False),
        ("a/**/c.txt", "a/c.txt", True),
        ("a/**/c.txt", "a/x/y/c.txt", True),
        ("ep?ch[0-9].pt", "epoch1.pt", True),
        ("./metrics.json", "metrics.json", True),
    ],
)
def test_it_matches_globs(pattern, path, hit):
    assert bool(glob_regex(pattern).match(path)) is hit


def test_it_collects_declared_outputs_only(job_dir: Path):
    rels = [rel for rel, _ in collect(job_dir, ["checkpoints/**", "metrics.json"])]
    assert rels == ["checkpoints/epoch1/model.pt", "checkpoints/last.pt", "metrics.json"]


def test_a_directory_pattern_takes_the_tree(job_dir: Path):
    rels = [rel for rel, _ in collect(job_dir, ["checkpoints/epoch1"])]
    assert rels == ["checkpoints/epoch1/model.pt"]


def test_it_writes_bundle_and_manifest(job_dir: Path, tmp_path: Path):
    bundle = pack(
        job_dir, ["checkpoints/**", "metrics.json"], tmp_path / "b" / "12-1.tar", job_id=12
    )
    assert bundle.sha256 == hashlib.sha256(bundle.path.read_bytes()).hexdigest()
    assert bundle.size_bytes == bundle.path.stat().st_size
    with tarfile.open(bundle.path) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))
        contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert all(m.isfile() for m in tar.getmembers())
    assert "manifest.json" in names
    assert not any("passwd" in n or "outdir" in n or "secret" in n for n in names)
    assert manifest["job_id"] == 12
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == set(names) - {"manifest.json"}
    for path, entry in files.items():
        assert entry["size_bytes"] == len(contents[path])
        assert entry["sha256"] == hashlib.sha256(contents[path]).hexdigest()
    assert "checkpoints/metrics-link.json" not in contents  # links are never followed, even inside
    assert [f.path for f in bundle.files] == list(files)


def test_nothing_matched_gives_a_manifest_only_bundle(job_dir: Path, tmp_path: Path):
    bundle = pack(job_dir, ["nope/**"], tmp_path / "b.tar", job_id=3)
    with tarfile.open(bundle.path) as tar:
        assert tar.getnames() == ["manifest.json"]
    assert bundle.files == []


@pytest.mark.parametrize("pattern", ["../12-other/**", "/etc/passwd", "a/../../x", "/"])
def test_unsafe_patterns_are_refused(job_dir: Path, tmp_path: Path, pattern):
    with pytest.raises(PackError, match="output path"):
        pack(job_dir, ["metrics.json", pattern], tmp_path / "b.tar", job_id=1)


def test_special_files_and_links_are_skipped_and_nothing_outside_is_read(job_dir: Path, tmp_path: Path):
    other_job = tmp_path / "jobs" / "13"
    other_job.mkdir()
    (other_job / "theirs.txt").write_text("another job's file")
    os.symlink(other_job, job_dir / "other")  # a linked parent dir: never descended
    os.symlink(other_job / "theirs.txt", job_dir / "theirs.txt")
    os.symlink("/dev/null", job_dir / "null")
    os.symlink("/etc", job_dir / "etc")
    os.mkfifo(job_dir / "pipe")  # opening it would block: it is never opened
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(job_dir / "sock"))
    try:
        os.mknod(job_dir / "zero", 0o666 | 0o020000, os.makedev(1, 5))  # a char device, where allowed
    except (PermissionError, OSError):
        pass
    bundle = pack(job_dir, ["**"], tmp_path / "b.tar", job_id=12)
    sock.close()
    names = {f.path for f in bundle.files}
    assert names == {"checkpoints/epoch1/model.pt", "checkpoints/last.pt", "metrics.json",
                     "scratch.tmp", "logs/a.json"}
    with tarfile.open(bundle.path) as tar:
        assert all(m.isfile() for m in tar.getmembers())
        assert set(tar.getnames()) == names | {"manifest.json"}


def test_a_dir_swapped_for_a_link_after_the_walk_reads_nothing(job_dir: Path, tmp_path: Path, monkeypatch):
    import e31_agent.packer as packer

    real_collect = packer._collect

    def collect_then_swap(root, regexes):
        found = real_collect(root, regexes)
        (job_dir / "logs" / "a.json").unlink()
        (job_dir / "logs").rmdir()
        os.symlink(tmp_path / "outside", job_dir / "logs")
        (tmp_path / "outside" / "a.json").write_text("outside the job dir")
        return found

    monkeypatch.setattr(packer, "_collect", collect_then_swap)
    bundle = pack(job_dir, ["logs/**", "metrics.json"], tmp_path / "b.tar", job_id=12)
    assert [f.path for f in bundle.files] == ["metrics.json"]
    assert bundle.not_packed == ("logs/a.json (no longer a regular file)",)  # said, never silently missing


def test_outputs_over_the_cap_fail_with_a_clear_error(job_dir: Path, tmp_path: Path):
    with pytest.raises(PackError, match=r"hold 7\d\d bytes; the most a bundle may hold is 100 bytes"):
        pack(job_dir, ["checkpoints/**"], tmp_path / "b.tar", job_id=12, max_bytes=100)
    assert pack(job_dir, ["checkpoints/**"], tmp_path / "b.tar", job_id=12, max_bytes=10_000).files


def test_the_bundle_checksum_is_that_of_the_file(job_dir: Path, tmp_path: Path):
    bundle = pack(job_dir, ["**"], tmp_path / "b.tar", job_id=12)
    assert bundle.sha256 == hashlib.sha256(bundle.path.read_bytes()).hexdigest()
    assert bundle.size_bytes == bundle.path.stat().st_size


def _outputs(job: Path) -> dict[str, bytes]:
    """Files of several sizes: empty, small, exactly one block, several blocks and a tail."""
    import e31_agent.packer as packer

    files = {
        "empty.txt": b"",
        "small.json": b'{"acc": 0.9}',
        "one-block.bin": os.urandom(packer.BLOCK_BYTES),
        "deep/dir/weights.bin": os.urandom(packer.BLOCK_BYTES * packer.BUFFERS + 12_345),
        "just-over-small.bin": os.urandom(packer.SMALL_BYTES + 1),
        "ünïcode name with spaces.txt": b"text " * 1000,
        "long/" + "x" * 150 + "/name.txt": b"a long name needs a pax header",
    }
    for rel, data in files.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    return files


def test_each_file_lies_whole_at_its_offset(tmp_path: Path):
    """Issue 15 item 2 / issue 16 item 2: archive[offset:offset + size] is the file, so the server
    serves one file by a Range read; the manifest inside records the same offsets."""
    job = tmp_path / "job"
    job.mkdir()
    files = _outputs(job)
    bundle = pack(job, ["**"], tmp_path / "b.tar", job_id=7)
    archive = bundle.path.read_bytes()
    assert {f.path for f in bundle.files} == set(files)
    for entry in bundle.files:
        data = archive[entry.offset:entry.offset + entry.size_bytes]
        assert data == files[entry.path]
        assert entry.sha256 == hashlib.sha256(data).hexdigest() and entry.size_bytes == len(data)
    with tarfile.open(bundle.path, mode="r:") as tar:  # plain tar: no compression at all
        members = {m.name: m for m in tar.getmembers()}
        manifest = json.load(tar.extractfile("manifest.json"))
    assert {e.path: e.offset for e in bundle.files} == {n: m.offset_data for n, m in members.items()
                                                        if n != "manifest.json"}
    assert manifest["format"] == "tar"
    assert manifest["files"] == [e.to_json() for e in bundle.files]
    assert all(set(f) == {"path", "size_bytes", "sha256", "offset"} for f in manifest["files"])
    assert len(archive) % tarfile.RECORDSIZE == 0


def test_the_archive_is_the_same_for_the_same_files(tmp_path: Path):
    job = tmp_path / "job"
    job.mkdir()
    _outputs(job)
    one = pack(job, ["**"], tmp_path / "one.tar", job_id=7)
    two = pack(job, ["**"], tmp_path / "two.tar", job_id=7)
    assert one.sha256 == two.sha256 and one.path.read_bytes() == two.path.read_bytes()
    with tarfile.open(one.path) as tar:
        for m in tar.getmembers():
            assert (m.uid, m.gid, m.uname, m.gname, m.type) == (0, 0, "", "", tarfile.REGTYPE)


def test_standard_tar_unpacks_the_bundle(tmp_path: Path):
    import subprocess

    job = tmp_path / "job"
    job.mkdir()
    files = _outputs(job)
    bundle = pack(job, ["**"], tmp_path / "b.tar", job_id=7)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(bundle.path), "-C", str(out)], check=True)
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data


def test_a_file_that_shrinks_while_packed_fails_and_leaves_no_archive(tmp_path: Path, monkeypatch):
    import e31_agent.packer as packer

    job = tmp_path / "job"
    job.mkdir()
    (job / "big.bin").write_bytes(os.urandom(packer.SMALL_BYTES * 3))
    real_header = packer._header

    def header_then_shrink(info):  # after its size went into the header
        if info.name == "big.bin":
            os.truncate(job / "big.bin", 10)
        return real_header(info)

    monkeypatch.setattr(packer, "_header", header_then_shrink)
    with pytest.raises(PackError, match="big.bin shrank while being packed"):
        pack(job, ["**"], tmp_path / "b.tar", job_id=1)
    assert not (tmp_path / "b.tar").exists()


def test_declared_outputs_that_matched_no_file_are_named(job_dir, tmp_path):
    bundle = pack(job_dir, ["checkpoints", "results/*.csv", "**/*.json", " model.pt ", "scratch/**"],
                  tmp_path / "b.tar", job_id=12)
    assert bundle.unmatched == ("results/*.csv", "model.pt", "scratch/**")
    assert any(f.path == "metrics.json" for f in bundle.files)


def test_a_link_only_match_is_no_match(job_dir, tmp_path):
    # checkpoints/passwd is a symlink: never packed, so "checkpoints/passwd" matched no file
    assert pack(job_dir, ["checkpoints/passwd"], tmp_path / "b.tar", job_id=12).unmatched == ("checkpoints/passwd",)
    assert pack(job_dir, [], tmp_path / "c.tar", job_id=12).unmatched == ()


def test_names_with_control_characters_or_not_utf8_are_left_out_and_named_the_rest_packed(tmp_path: Path):
    job = tmp_path / "job"
    (job / "out").mkdir(parents=True)
    (job / "out" / "good.txt").write_text("kept")
    (job / "out" / "line\nbreak.txt").write_text("x")
    (job / "out" / "cr\r.txt").write_text("x")
    os.close(os.open(os.path.join(os.fsencode(job / "out"), b"caf\xe9.txt"), os.O_CREAT | os.O_WRONLY, 0o644))
    bundle = pack(job, ["out/"], tmp_path / "bundle.tar", job_id=1)
    assert [f.path for f in bundle.files] == ["out/good.txt"]
    assert sorted(bundle.not_packed) == ["out/caf\\xe9.txt (its name is not UTF-8)",
                                         "out/cr\\x0d.txt (its name holds a control character)",
                                         "out/line\\x0abreak.txt (its name holds a control character)"]
    json.dumps(list(bundle.not_packed), ensure_ascii=False).encode("utf-8")  # the report can carry them
    with tarfile.open(tmp_path / "bundle.tar") as tar:
        assert sorted(tar.getnames()) == ["manifest.json", "out/good.txt"]
