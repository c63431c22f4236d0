"""Packer: globs, manifest checksums, links that lead out are never packed."""

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest
from e31_agent.packer import collect, glob_regex, pack


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
    assert rels == [
        "checkpoints/epoch1/model.pt",
        "checkpoints/last.pt",
        "checkpoints/metrics-link.json",
        "metrics.json",
    ]


def test_a_directory_pattern_takes_the_tree(job_dir: Path):
    rels = [rel for rel, _ in collect(job_dir, ["checkpoints/epoch1"])]
    assert rels == ["checkpoints/epoch1/model.pt"]


def test_it_writes_bundle_and_manifest(job_dir: Path, tmp_path: Path):
    bundle = pack(
        job_dir, ["checkpoints/**", "metrics.json"], tmp_path / "b" / "12-1.tar.gz", job_id=12
    )
    assert bundle.sha256 == hashlib.sha256(bundle.path.read_bytes()).hexdigest()
    assert bundle.size_bytes == bundle.path.stat().st_size
    with tarfile.open(bundle.path) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))
        contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert all(m.isfile() for m in tar.getmembers())  # links are packed as content
    assert "manifest.json" in names
    assert not any("passwd" in n or "outdir" in n or "secret" in n for n in names)
    assert manifest["job_id"] == 12
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == set(names) - {"manifest.json"}
    for path, entry in files.items():
        assert entry["size_bytes"] == len(contents[path])
        assert entry["sha256"] == hashlib.sha256(contents[path]).hexdigest()
    assert contents["checkpoints/metrics-link.json"] == b'{"acc": 0.9}'
    assert [f.path for f in bundle.files] == list(files)


def test_nothing_matched_gives_a_manifest_only_bundle(job_dir: Path, tmp_path: Path):
    bundle = pack(job_dir, ["nope/**"], tmp_path / "b.tar.gz", job_id=3)
    with tarfile.open(bundle.path) as tar:
        assert tar.getnames() == ["manifest.json"]
    assert bundle.files == []
