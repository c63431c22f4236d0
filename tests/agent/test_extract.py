"""Safe extraction: no entry may land outside the target."""

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from e31_agent.extract import ExtractError, safe_extract


def _tar(path: Path, entries: list[tuple[str, bytes | None, str | None]], mode="w:gz") -> Path:
    """entries: (name, data, symlink target)."""
    with tarfile.open(path, mode) as tar:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
    return path


def test_it_unpacks_tar_gz_and_zip(tmp_path: Path):
    tgz = _tar(tmp_path / "d.tar.gz", [("data/a.txt", b"a", None), ("data/l", None, "a.txt")])
    safe_extract(tgz, tmp_path / "out")
    assert (tmp_path / "out" / "data" / "a.txt").read_bytes() == b"a"
    assert os.readlink(tmp_path / "out" / "data" / "l") == "a.txt"
    plain = _tar(tmp_path / "d.tar", [("b.txt", b"b", None)], mode="w")
    safe_extract(plain, tmp_path / "out2")
    assert (tmp_path / "out2" / "b.txt").read_bytes() == b"b"
    with zipfile.ZipFile(tmp_path / "d.zip", "w") as zf:
        zf.writestr("z/c.txt", "c")
    safe_extract(tmp_path / "d.zip", tmp_path / "out3")
    assert (tmp_path / "out3" / "z" / "c.txt").read_text() == "c"


@pytest.mark.parametrize(
    "entry",
    [
        ("../x", b"evil", None),
        ("a/../../x", b"evil", None),
        ("/tmp/evil-abs", b"evil", None),
        ("link", None, "/etc"),
        ("a/link", None, "../../outside"),
    ],
)
def test_it_refuses_entries_that_leave_the_target(tmp_path: Path, entry):
    archive = _tar(tmp_path / "bad.tar.gz", [("ok.txt", b"ok", None), entry])
    dest = tmp_path / "dest"
    with pytest.raises(ExtractError):
        safe_extract(archive, dest)
    assert not (tmp_path / "x").exists()
    assert not (dest / "ok.txt").exists()  # checked before anything is written


@pytest.mark.parametrize("name", ["../x", "/tmp/evil-abs-zip"])
def test_it_refuses_bad_zip_entries(tmp_path: Path, name):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr(name, "evil")
    with pytest.raises(ExtractError):
        safe_extract(tmp_path / "bad.zip", tmp_path / "dest")
    assert not (tmp_path / "x").exists()


def test_it_refuses_what_is_not_an_archive(tmp_path: Path):
    (tmp_path / "f.tar.gz").write_bytes(b"not an archive at all")
    with pytest.raises(ExtractError, match="not a tar or zip"):
        safe_extract(tmp_path / "f.tar.gz", tmp_path / "dest")


def _special(path: Path, name: str, kind: bytes, linkname: str = "") -> Path:
    with tarfile.open(path, "w") as tar:
        tar.addfile(_info("ok.txt", 2), io.BytesIO(b"ok"))
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = linkname
        tar.addfile(info)
    return path


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


@pytest.mark.parametrize(
    ("kind", "linkname", "why"),
    [
        (tarfile.LNKTYPE, "/etc/passwd", "absolute"),
        (tarfile.LNKTYPE, "../outside.txt", r"'\.\.'"),
        (tarfile.SYMTYPE, "/etc/passwd", "absolute"),
        (tarfile.SYMTYPE, "../../etc/passwd", "outside"),
        (tarfile.CHRTYPE, "", "device or fifo"),
        (tarfile.BLKTYPE, "", "device or fifo"),
        (tarfile.FIFOTYPE, "", "device or fifo"),
    ],
)
def test_it_refuses_links_out_devices_and_fifos(tmp_path: Path, kind, linkname, why):
    archive = _special(tmp_path / "bad.tar", "entry", kind, linkname)
    with pytest.raises(ExtractError, match=why):
        safe_extract(archive, tmp_path / "dest")
    assert not (tmp_path / "dest" / "ok.txt").exists()


def test_a_hardlink_inside_the_target_is_unpacked(tmp_path: Path):
    archive = _special(tmp_path / "ok.tar", "again.txt", tarfile.LNKTYPE, "ok.txt")
    safe_extract(archive, tmp_path / "dest")
    assert (tmp_path / "dest" / "again.txt").read_bytes() == b"ok"


def test_a_link_already_in_the_target_cannot_lead_an_entry_out(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)
    archive = _tar(tmp_path / "d.tar", [("sub/evil.txt", b"evil", None)], mode="w")
    with pytest.raises(ExtractError):
        safe_extract(archive, dest)
    assert not (outside / "evil.txt").exists()
    with zipfile.ZipFile(tmp_path / "d.zip", "w") as zf:
        zf.writestr("sub/evil.txt", "evil")
    with pytest.raises(ExtractError, match="outside"):
        safe_extract(tmp_path / "d.zip", dest)
    assert not (outside / "evil.txt").exists()


def test_zip_links_are_refused(tmp_path: Path):
    info = zipfile.ZipInfo("link")
    info.external_attr = (0o120777 << 16)
    with zipfile.ZipFile(tmp_path / "l.zip", "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ExtractError, match="links"):
        safe_extract(tmp_path / "l.zip", tmp_path / "dest")
