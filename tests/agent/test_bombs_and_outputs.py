"""Decompression bombs, 50,000 outputs and hard links (issue 11): caps with clear errors."""

import io
import os
import resource
import tarfile
import zipfile
from pathlib import Path

import pytest
from e31_agent.extract import ExtractError, ExtractLimits, safe_extract
from e31_agent.job import not_packed_note
from e31_agent.models import DataItem
from e31_agent.packer import OutputLimits, PackError, pack
from e31_agent.staging import Stager, StagingError

ZEROS = 32 * 1024 * 1024  # 32 MiB of zeros compress ~1000:1
SMALL_FLOOR = ExtractLimits(ratio_floor=1024 * 1024)


def _zip_bomb(path: Path, size: int = ZEROS) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open("zeros.bin", "w") as out:
            block = bytes(1 << 20)
            for _ in range(size // len(block)):
                out.write(block)
    return path


def _tgz_bomb(path: Path, size: int = ZEROS) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def read(self, n=-1):
                n = self.left if n < 0 else min(n, self.left)
                self.left -= n
                return bytes(n)

        tar.addfile(info, Zeros())
    return path


@pytest.mark.parametrize("make", [_zip_bomb, _tgz_bomb])
def test_a_bomb_is_refused_by_its_ratio(tmp_path, make):
    archive = make(tmp_path / "bomb")
    assert archive.stat().st_size < ZEROS / 200
    with pytest.raises(ExtractError, match=r"more than 200 times its size .* decompression bomb"):
        safe_extract(archive, tmp_path / "out", limits=SMALL_FLOOR)
    written = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written <= 2 * 1024 * 1024  # stopped at the cap, not after unpacking it all


@pytest.mark.parametrize("make", [_zip_bomb, _tgz_bomb])
def test_unpacked_bytes_are_capped(tmp_path, make):
    archive = make(tmp_path / "big", size=4 * 1024 * 1024)
    with pytest.raises(ExtractError, match=r"unpacks to more than 3,145,728 bytes, the cap of this node"):
        safe_extract(archive, tmp_path / "out", limits=ExtractLimits(max_bytes=3 * 1024 * 1024))
    assert safe_extract(archive, tmp_path / "ok", limits=ExtractLimits(max_bytes=8 * 1024 * 1024)) == 4 * 1024 * 1024


def test_entries_are_capped(tmp_path):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(101):
            zf.writestr(f"f{i}.txt", b"x")
    with pytest.raises(ExtractError, match=r"more than 100 entries"):
        safe_extract(archive, tmp_path / "out", limits=ExtractLimits(max_members=100))


def test_the_default_caps_refuse_a_1_mb_archive_of_1_gib(tmp_path):
    """The attack as reported: about 1 MB packed, 1 GiB unpacked (default limits, nothing lowered)."""
    archive = _tgz_bomb(tmp_path / "bomb.tar.gz", size=1024**3)
    assert archive.stat().st_size < 1_200_000
    with pytest.raises(ExtractError, match="decompression bomb"):
        safe_extract(archive, tmp_path / "out", limits=ExtractLimits())
    written = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == 0  # a tar is counted from its headers before anything is written


def test_staging_a_bomb_fails_naming_the_input(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _zip_bomb(src / "data.zip")
    job = tmp_path / "job"
    job.mkdir()
    stager = Stager(client=None, job_dir=job, tmp_dir=tmp_path / "tmp", cache=None, file_roots=[src],
                    extract_limits=SMALL_FLOOR)
    ok = DataItem(source=(src / "data.zip").as_uri(), target="plain/")
    with pytest.raises(StagingError, match=r"^data\[1\]: file://.*data\.zip: the archive unpacks to more than 200"):
        stager.stage([ok, DataItem(source=(src / "data.zip").as_uri(), target="in/", extract=True)])


# --- outputs -----------------------------------------------------------------
@pytest.fixture
def low_nofile():
    """RLIMIT_NOFILE of what the test process holds already plus 32: a packer that held every
    output open would fail at once (the files open before it, from earlier tests of a whole-suite
    run, are not the packer's)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 32, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _many(job: Path, count: int) -> None:
    for d in range(count // 1000):
        sub = job / "out" / f"d{d:03}"
        sub.mkdir(parents=True)
        for i in range(1000):
            (sub / f"f{i:04}.txt").write_bytes(b"%d" % i)


@pytest.fixture(scope="module")
def job_of_50000(tmp_path_factory) -> Path:
    job = tmp_path_factory.mktemp("many") / "job"
    _many(job, 50_000)
    return job


def test_50000_outputs_are_all_packed_with_few_files_open(tmp_path, low_nofile, job_of_50000):
    job = job_of_50000
    bundle = pack(job, ["out/**"], tmp_path / "b.tar", job_id=1, limits=OutputLimits(max_files=100_000))
    assert len(bundle.files) == 50_000 and bundle.not_packed == ()
    with tarfile.open(bundle.path) as tar:
        assert len(tar.getnames()) == 50_001  # and the manifest


def test_outputs_over_the_file_cap_fail_with_a_clear_error(tmp_path, job_of_50000):
    job = job_of_50000
    with pytest.raises(PackError, match=r"50,000 output files is over the cap of 10,000 files a job may return"):
        pack(job, ["out/**"], tmp_path / "b.tar", job_id=1, limits=OutputLimits(max_files=10_000))
    assert not (tmp_path / "b.tar").exists()


def test_outputs_over_the_agent_byte_cap_fail(tmp_path):
    job = tmp_path / "job"
    (job / "out").mkdir(parents=True)
    (job / "out" / "big.bin").write_bytes(b"x" * 5000)
    with pytest.raises(PackError, match=r"5,000 bytes; the most a bundle may hold is 4,000 bytes"):
        pack(job, ["out/**"], tmp_path / "b.tar", job_id=1, max_bytes=10**9,
             limits=OutputLimits(max_bytes=4000))


def test_a_hard_link_to_a_file_outside_the_job_dir_never_comes_back(tmp_path):
    job = tmp_path / "job"
    (job / "out").mkdir(parents=True)
    secret = tmp_path / "agent" / "secret_key"
    secret.parent.mkdir()
    secret.write_text("the agent's secret")
    os.link(secret, job / "out" / "stolen.txt")
    (job / "out" / "a.txt").write_text("mine")
    os.link(job / "out" / "a.txt", job / "out" / "a-again.txt")  # every link inside: fine
    bundle = pack(job, ["out/**"], tmp_path / "b.tar", job_id=1)
    assert sorted(f.path for f in bundle.files) == ["out/a-again.txt", "out/a.txt"]
    assert bundle.not_packed == ("out/stolen.txt (a hard link to a file outside the job dir)",)
    with tarfile.open(bundle.path) as tar:
        assert "out/stolen.txt" not in tar.getnames()
        assert b"secret" not in b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    note = not_packed_note(bundle.not_packed)
    assert note == "outputs not packed: 1 declared file: out/stolen.txt (a hard link to a file outside the job dir)"
