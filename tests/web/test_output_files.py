"""The job page's output files (issue 16 item 2): each file's download and preview page, and
escaping of hostile content. Jobs run through the services; bundles packed by the agent packer."""
import json
import re
from pathlib import Path

import pytest
from django.conf import settings

from .factories import finished_job

pytestmark = pytest.mark.django_db

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4"
       b"\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script><rect width="4" height="4"/></svg>'
HOSTILE = "<script>alert('x')</script>"


def _job(user, files):
    job, _archive = finished_job(user, files=files, packer=True)
    return job


def test_the_bundle_card_links_each_file_and_previews_the_kinds_it_can(web, user, node):
    job = _job(user, {"out/plot.png": PNG, "out/metrics.json": b"{}", "out/model.bin": b"\0" * 64})
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    for path in ("out/plot.png", "out/metrics.json", "out/model.bin"):
        assert f'href="/jobs/{job.pk}/download/{path}"' in html
    assert f'href="/jobs/{job.pk}/files/out/plot.png"' in html
    assert f'href="/jobs/{job.pk}/files/out/metrics.json"' in html
    assert f'href="/jobs/{job.pk}/files/out/model.bin"' not in html  # no preview for it


def test_an_image_is_shown_from_its_inline_url(web, user, node):
    job = _job(user, {"out/plot.png": PNG})
    resp = web.get(f"/jobs/{job.pk}/files/out/plot.png")
    assert resp.status_code == 200
    assert f'<img class="preview-image" src="/jobs/{job.pk}/download/out/plot.png?inline=1"' in resp.content.decode()
    img = web.get(f"/jobs/{job.pk}/download/out/plot.png?inline=1")
    assert img["Content-Type"] == "image/png" and img["Content-Disposition"] == 'inline; filename="plot.png"'
    assert b"".join(img.streaming_content) == PNG


def test_an_svg_is_an_attachment_even_when_inline_is_asked(web, user, node):
    job = _job(user, {"out/chart.svg": SVG})
    page = web.get(f"/jobs/{job.pk}/files/out/chart.svg").content.decode()
    assert f'src="/jobs/{job.pk}/download/out/chart.svg?inline=1"' in page  # <img> runs no script
    resp = web.get(f"/jobs/{job.pk}/download/out/chart.svg?inline=1")
    assert resp["Content-Disposition"].startswith("attachment;")
    assert resp["Content-Type"] == "image/svg+xml"
    assert "sandbox" in resp["Content-Security-Policy"] and "default-src 'none'" in resp["Content-Security-Policy"]


def test_json_is_pretty_printed(web, user, node):
    job = _job(user, {"out/metrics.json": json.dumps({"loss": 0.25, "tags": ["a", HOSTILE]}).encode()})
    html = web.get(f"/jobs/{job.pk}/files/out/metrics.json").content.decode()
    assert '{\n  &quot;loss&quot;: 0.25,\n  &quot;tags&quot;: [\n    &quot;a&quot;,' in html
    assert HOSTILE not in html and "&lt;script&gt;" in html


def test_a_large_json_shows_its_first_256_kib_as_stored(web, user, node):
    data = json.dumps({"values": list(range(60_000))}).encode()
    assert len(data) > 256 * 1024
    job = _job(user, {"big.json": data})
    html = web.get(f"/jobs/{job.pk}/files/big.json").content.decode()
    assert "Larger than 256 KiB" in html
    assert str(59_999) not in html and "[0, 1, 2, 3" in html


def test_a_csv_shows_its_header_and_first_100_rows_as_a_table_escaped(web, user, node):
    rows = ["step,loss,note", f'0,0.9,"{HOSTILE}"'] + [f"{i},0.{i},ok" for i in range(1, 150)]
    job = _job(user, {"out/loss.csv": "\n".join(rows).encode()})
    html = web.get(f"/jobs/{job.pk}/files/out/loss.csv").content.decode()
    assert '<th scope="col">step</th><th scope="col">loss</th><th scope="col">note</th>' in html
    assert "<td>99</td>" in html and "<td>100</td>" not in html  # rows 0..99
    assert "The first 100 rows." in html
    assert HOSTILE not in html and "<td>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</td>" in html


def test_text_is_shown_escaped_and_cut_at_256_kib(web, user, node):
    job = _job(user, {"train.log": f"epoch 1\n{HOSTILE}\n".encode(), "long.txt": b"x" * (300 * 1024)})
    html = web.get(f"/jobs/{job.pk}/files/train.log").content.decode()
    assert HOSTILE not in html and "epoch 1\n&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    long = web.get(f"/jobs/{job.pk}/files/long.txt").content.decode()
    assert "The first 256 KiB of the file." in long
    assert "x" * (256 * 1024) in long and "x" * (256 * 1024 + 1) not in long


def test_a_hostile_file_name_is_escaped_and_a_binary_or_unknown_file_has_no_preview(web, user, node):
    name = "out/<img src=x onerror=alert(1)>.txt"
    job = _job(user, {name: b"fine\n", "out/blob.txt": b"a\0b", "out/model.bin": b"\1\2"})
    card = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "<img src=x" not in card and "&lt;img src=x onerror=alert(1)&gt;.txt" in card
    page = web.get(f"/jobs/{job.pk}/files/{name}")
    assert page.status_code == 200 and "<img src=x" not in page.content.decode()
    assert "binary data" in web.get(f"/jobs/{job.pk}/files/out/blob.txt").content.decode()
    assert "No preview" in web.get(f"/jobs/{job.pk}/files/out/model.bin").content.decode()


def test_strangers_missing_paths_and_traversal_get_404(web, stranger_web, user, node):
    job = _job(user, {"out/a.txt": b"a"})
    assert stranger_web.get(f"/jobs/{job.pk}/files/out/a.txt").status_code == 404
    assert stranger_web.get(f"/jobs/{job.pk}/download/out/a.txt").status_code == 404
    for path in ("out/b.txt", "../out/a.txt", "out/../out/a.txt", "/out/a.txt"):
        assert web.get(f"/jobs/{job.pk}/files/{path}").status_code == 404, path
        assert web.get(f"/jobs/{job.pk}/download/{path}").status_code == 404, path
    assert web.get(f"/jobs/{job.pk}/files/out/a.txt?rank=x").status_code == 404


def test_an_older_agents_bundle_has_no_per_file_links_and_its_file_page_says_why(web, user, node):
    job, _archive = finished_job(user, files={"out/a.txt": b"a"})  # tar.gz, no offsets
    card = web.get(f"/jobs/{job.pk}/").content.decode()
    assert f"/jobs/{job.pk}/download/" not in card and "come only in the whole bundle" in card
    page = web.get(f"/jobs/{job.pk}/files/out/a.txt")
    assert page.status_code == 409 and "Download the whole bundle instead." in page.content.decode()
    assert web.get(f"/jobs/{job.pk}/download/out/a.txt").status_code == 409


def test_the_card_and_the_preview_pages_do_not_overflow_at_390_px(web, user, node, monkeypatch):
    """Each page as served, with the site's CSS, in Debian's chromium 390 px wide: no sideways scroll."""
    from playwright.sync_api import sync_playwright

    from ..browser.conftest import CHROMIUM, CHROMIUM_ARGS

    wide_csv = ",".join(f"column_{i}" for i in range(40)) + "\n" + ",".join("7" * 30 for _ in range(40))
    long_name = "out/" + "a_very_long_file_name_without_any_space" * 3 + ".txt"
    job = _job(user, {"out/wide.csv": wide_csv.encode(), long_name: b"y" * 3000 + b"\n",
                      "out/m.json": json.dumps({"k" * 200: "v" * 400}).encode(), "out/p.png": PNG})
    css = (Path(settings.BASE_DIR) / "static" / "css" / "e31.css").read_text()
    pages = {url: web.get(url).content.decode() for url in (
        f"/jobs/{job.pk}/", f"/jobs/{job.pk}/files/out/wide.csv", f"/jobs/{job.pk}/files/{long_name}",
        f"/jobs/{job.pk}/files/out/m.json", f"/jobs/{job.pk}/files/out/p.png")}
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_page(viewport={"width": 390, "height": 844})
            for url, html in pages.items():
                html = re.sub(r'<link rel="stylesheet" href="[^"]*">', lambda _m: f"<style>{css}</style>", html)
                page.set_content(re.sub(r"<script [^>]*></script>", "", html))
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= 390, f"{url} is {width} px wide at 390 px"
                if url == f"/jobs/{job.pk}/":  # the file list fits too: a long path wraps
                    table = page.evaluate(f"document.querySelector('#job-{job.pk}-bundle table')"
                                          ".getBoundingClientRect().right")
                    assert table <= 390, f"the bundle's file table ends at {table} px"
        finally:
            chromium.close()
