"""Logs kept by stream with the agent's time, searched and paged on the server, compacted into
one storage object at release (issue 16, item 5; SPEC §5 "Logs")."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.files.storage import default_storage

from apps.jobs.models import Job, LogChunk
from apps.jobs.services.logs import log_append, log_compact, log_object_name
from tests.drive import Agent, rented_job

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _at(s: int) -> datetime:
    return T0.replace(second=s)


@pytest.fixture
def job(owner, pool):
    """A running job whose agent wrote stdout and stderr interleaved."""
    job = rented_job(owner)
    agent = Agent(job)
    agent.start()
    size = agent.log(b"epoch 1 loss 0.5\n", stream="stdout", at=_at(1))
    size = agent.log(b"warning: a.b deprecated\n", size, stream="stderr", at=_at(2))
    size = agent.log(b"epoch 2 loss 0.4\naxb literal?\n", size, stream="stdout", at=_at(3))
    agent.log(b"Traceback [x]\n", size, stream="stderr", at=_at(4))
    job.refresh_from_db()
    job.test_agent = agent  # the same agent ends it (its report numbers go on)
    return job


def _lines(api, job, **params):
    resp = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"format": "lines", **params})
    assert resp.status_code == 200, resp.content
    return resp.json()


def test_chunks_keep_their_stream_and_time(job):
    rows = list(LogChunk.objects.filter(job=job).order_by("offset").values_list("stream", "at"))
    assert rows == [("stdout", _at(1)), ("stderr", _at(2)), ("stdout", _at(3)), ("stderr", _at(4))]


def test_lines_say_stream_and_time_and_the_raw_text_stays_whole(api, job):
    page = _lines(api, job)
    assert [(x["stream"], x["text"]) for x in page["lines"]] == [
        ("stdout", "epoch 1 loss 0.5"), ("stderr", "warning: a.b deprecated"), ("stdout", "epoch 2 loss 0.4"),
        ("stdout", "axb literal?"), ("stderr", "Traceback [x]")]
    assert page["lines"][1]["at"] == _at(2).isoformat() and page["total"] == 5
    assert [x["n"] for x in page["lines"]] == [1, 2, 3, 4, 5]
    text = api.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert text.content.count(b"\n") == 5 and text["X-Next-Offset"] == str(job.log_size)


def test_one_stream_only(api, job):
    assert [x["text"] for x in _lines(api, job, stream="stderr")["lines"]] == [
        "warning: a.b deprecated", "Traceback [x]"]
    resp = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"stream": "stderr"})
    assert resp.content == b"warning: a.b deprecated\nTraceback [x]\n"
    assert resp["X-Next-Offset"] == str(job.log_size)  # the window covered, to follow from
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/", {"stream": "stdout"}).content.startswith(b"epoch 1")


@pytest.mark.parametrize(("q", "texts"), [
    ("a.b", ["warning: a.b deprecated"]),  # the dot is a dot, not "any character" (axb stays out)
    ("[x]", ["Traceback [x]"]),
    ("literal?", ["axb literal?"]),
    ("EPOCH", ["epoch 1 loss 0.5", "epoch 2 loss 0.4"]),  # case-insensitive
    ("(", []), ("\\", []), ("*", []),  # not a pattern: no error
])
def test_search_is_literal(api, job, q, texts):
    page = _lines(api, job, q=q)
    assert [x["text"] for x in page["lines"]] == texts and page["total"] == len(texts)


def test_pages_of_lines(api, job):
    last = _lines(api, job, limit=2)  # no offset: the last page (the tail)
    assert (last["offset"], last["total"], last["next_offset"], last["prev_offset"]) == (3, 5, None, 1)
    first = _lines(api, job, limit=2, offset=0)
    assert [x["n"] for x in first["lines"]] == [1, 2] and first["next_offset"] == 2
    assert _lines(api, job, offset=10**12)["lines"] == []  # past the end: an empty page, not an error


@pytest.mark.parametrize(("params", "field"), [
    ({"stream": "stdin"}, "stream"), ({"format": "xml"}, "format"), ({"q": "x" * 201}, "q"),
    ({"format": "lines", "limit": 0}, "limit"), ({"format": "lines", "limit": 10**6}, "limit"),
    ({"format": "lines", "offset": -1}, "offset"), ({"format": "lines", "offset": "x"}, "offset"),
    ({"limit": 10**9}, "limit"), ({"q": "a\x00b"}, "q"),
])
def test_bad_parameters_are_named(api, job, params, field):
    resp = api.get(f"/api/v1/jobs/{job.pk}/logs/", params)
    assert resp.status_code == 400 and field in resp.json()


def test_someone_elses_log_and_search_are_not_there(stranger_api, job):
    for params in ({}, {"q": "epoch"}, {"format": "lines", "stream": "stderr"}):
        assert stranger_api.get(f"/api/v1/jobs/{job.pk}/logs/", params).status_code == 404


def test_an_older_agents_log_reads_as_stdout(api, owner, pool):
    job = rented_job(owner)
    Agent(job).log(b"one\ntwo\n")  # no stream, no time
    page = _lines(api, job)
    assert [(x["stream"], x["at"]) for x in page["lines"]] == [("combined", None), ("combined", None)]
    assert len(_lines(api, job, stream="stdout")["lines"]) == 2 and _lines(api, job, stream="stderr")["total"] == 0


def test_a_line_split_across_chunks_of_one_stream_stays_one_line(api, owner, pool):
    job = rented_job(owner)
    agent = Agent(job)
    size = agent.log(b"progress 1", stream="stdout", at=_at(1))
    size = agent.log(b"oops\n", size, stream="stderr", at=_at(2))
    agent.log(b"0%\n", size, stream="stdout", at=_at(3))
    assert [(x["stream"], x["text"]) for x in _lines(api, job)["lines"]] == [
        ("stdout", "progress 10%"), ("stderr", "oops")]


def _release(job: Job, django_capture_on_commit_callbacks) -> Job:
    agent = job.test_agent
    agent.say("exited", exit_code=0, reason="exit")
    agent.bundle({})
    with django_capture_on_commit_callbacks(execute=True):
        agent.say("finished")
    job.refresh_from_db()
    return job


def test_release_compacts_the_log_into_one_storage_object(api, job, django_capture_on_commit_callbacks):
    before = api.get(f"/api/v1/jobs/{job.pk}/logs/").content
    lines_before = _lines(api, job)
    job = _release(job, django_capture_on_commit_callbacks)
    name = log_object_name(job.pk, 1)
    assert name == f"logs/{job.pk}/attempt-1.jsonl.gz"
    assert job.log_objects["1"]["name"] == name and default_storage.exists(name)
    assert not LogChunk.objects.filter(job=job).exists()
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/").content == before
    after = _lines(api, job)
    assert after["compacted"] and after["lines"] == lines_before["lines"]
    assert _lines(api, job, q="a.b")["total"] == 1
    # bytes that reach the store after compaction (an agent's post is refused as stale before)
    # are not kept: the store answers the size it has, so a sender stops
    assert log_append(job_id=job.pk, attempt=1, rank=0, offset=job.log_size, data=b"late\n") == job.log_size
    assert not LogChunk.objects.filter(job=job).exists()
    assert log_compact(job.pk) == []  # idempotent


def test_bytes_that_are_not_utf8_survive_compaction(api, owner, pool, django_capture_on_commit_callbacks):
    job = rented_job(owner)
    agent = Agent(job)
    agent.start()
    raw = b"\xff\xfebinary\x00\n"
    agent.log(raw, stream="stdout", at=_at(1))
    job.test_agent = agent
    job = _release(job, django_capture_on_commit_callbacks)
    assert job.log_objects and api.get(f"/api/v1/jobs/{job.pk}/logs/").content == raw


def test_a_log_object_retention_deleted_reads_as_empty(api, job, django_capture_on_commit_callbacks):
    job = _release(job, django_capture_on_commit_callbacks)
    default_storage.delete(job.log_objects["1"]["name"])
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/").content == b""
    assert _lines(api, job)["lines"] == []


def test_an_open_line_of_one_stream_never_holds_the_whole_log_back():
    """A stderr line left open (a progress bar with no newline) is cut once 10,000 lines wait behind
    it, so the lines view holds a bounded number of lines (issue 26), and every byte is still shown."""
    from datetime import UTC, datetime

    from apps.jobs.services.logs import MAX_WAITING_LINES, LogPiece, line_records

    at = datetime(2026, 1, 1, tzinfo=UTC)
    bar = LogPiece(0, b"progress 1%", "stderr", at)
    body = b"".join(b"row %d\n" % i for i in range(3 * MAX_WAITING_LINES))
    rows = [LogPiece(len(bar.data) + o, body[o:o + 4096], "stdout", at) for o in range(0, len(body), 4096)]
    records = line_records(iter([bar, *rows]))
    first = next(records)
    assert first == (0, "stderr", at, b"progress 1%", False)  # cut, not held to the end
    rest = list(records)
    assert len(rest) == 3 * MAX_WAITING_LINES
    assert b"".join(r[3] + b"\n" for r in rest) == body
