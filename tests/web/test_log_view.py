"""The log on the job page and the whole-log page: stderr marked, agent times, a literal
search, pages (issue 16, item 5)."""
from __future__ import annotations

from datetime import UTC, datetime

from tests.drive import Agent, rented_job

from .conftest import signed_in

T = datetime(2026, 12, 1, 9, 30, 15, tzinfo=UTC)


def _job(user):
    job = rented_job(user)
    agent = Agent(job)
    size = agent.log(b"step 1 <ok>\n", stream="stdout", at=T)
    agent.log(b"CUDA warning .*\n", size, stream="stderr", at=T)
    return job


def test_the_tail_marks_stderr_and_shows_times(web, user, node):
    job = _job(user)
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert '<span class="log-line log-err" title="stderr">' in html
    assert '<time class="log-ts" datetime="2026-12-01T09:30:15+00:00">' in html
    assert "step 1 &lt;ok&gt;" in html  # escaped
    assert f'action="/jobs/{job.pk}/log/lines/"' in html and 'role="search"' in html


def test_the_whole_log_page_searches_literally_and_pages(web, user, node):
    job = rented_job(user)
    agent = Agent(job)
    size = 0
    for i in range(1200):
        size = agent.log(b"line %04d\n" % i, size, stream="stderr" if i % 100 == 0 else "stdout", at=T)
    html = web.get(f"/jobs/{job.pk}/log/lines/").content.decode()
    assert "line 1199" in html and "line 0000" not in html and "Earlier lines" in html  # the last page first
    assert "lines 701–1200 of 1200" in html
    html = web.get(f"/jobs/{job.pk}/log/lines/?offset=0").content.decode()
    assert "line 0000" in html and "Later lines" in html
    html = web.get(f"/jobs/{job.pk}/log/lines/?q=line+00.0").content.decode()  # "." is not a wildcard
    assert "No line contains" in html
    html = web.get(f"/jobs/{job.pk}/log/lines/?stream=stderr").content.decode()
    assert "lines 1–12 of 12" in html and "line 1100" in html
    resp = web.get(f"/jobs/{job.pk}/log/lines/?offset=999999999999")
    assert resp.status_code == 200 and "past the end" in resp.content.decode()
    bad = web.get(f"/jobs/{job.pk}/log/lines/?stream=nope")
    assert bad.status_code == 400 and "stream" in bad.content.decode()


def test_a_stranger_gets_404_for_the_log_page_and_its_search(user, stranger_user, node):
    job = _job(user)
    other = signed_in(stranger_user)
    for url in (f"/jobs/{job.pk}/log/lines/", f"/jobs/{job.pk}/log/lines/?q=CUDA", f"/jobs/{job.pk}/log/"):
        assert other.get(url).status_code == 404


def test_a_live_chunk_carries_its_stream_and_time():
    from apps.web.jobs.fragments import render_log_chunk

    html = render_log_chunk(5, attempt=1, offset=10, data=b"oops\n", version=15, stream="stderr",
                            at=T.isoformat())
    assert 'data-stream="stderr"' in html and 'data-at="09:30:15"' in html and 'data-offset="10"' in html
    assert 'data-stream="combined"' in render_log_chunk(5, attempt=1, offset=0, data=b"x", version=1)
