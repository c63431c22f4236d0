"""The reason with the outcome (issue 28 item 2): ``submit --watch``, ``status`` and ``logs -f`` print a
released job's ``status_message`` beside its outcome; a gang's ``--watch`` follows every rank's log,
each line prefixed with its rank. Against a stand-in API (tests/cli/fake_api.py), no server."""
from __future__ import annotations

import json

import httpx
import pytest
from e31_cli import follow
from e31_cli.errors import Exit
from e31_cli.follow import RankLines
from e31_cli.main import main
from e31_cli.output import outcome_text

from tests.cli.fake_api import FakeApi, json_response

REASON = "command exited with code 3"


def job(state: str, *, nodes: int = 1, outcome: str | None = None, message: str = "", log_size: int = 0,
        **extra) -> dict:
    return {"id": 5, "name": "train", "state": state, "outcome": outcome, "status_message": message,
            "queue_position": None, "attempts": 1, "max_attempts": 1, "log_size": log_size,
            "spec": {"compute": {"gpus": 1, "nodes": nodes}}, "submitted_at": "2026-12-07T02:00:00Z",
            "billed_seconds": 1 if state == "released" else None, "cost": "0.01", "exit_code": None,
            "array_id": None, **extra}


class Script:
    """``GET /jobs/5/`` answers each of ``states`` in turn (the last one from then on); ``logs`` maps
    a rank to the chunks its log has grown by at each of those polls."""

    def __init__(self, states: list[dict], logs: dict[int, list[bytes]]):
        self.states, self.logs, self.poll = states, logs, -1

    def job(self, _request: httpx.Request) -> httpx.Response:
        self.poll = min(self.poll + 1, len(self.states) - 1)
        return json_response(200, self.states[self.poll])

    def log(self, request: httpx.Request) -> httpx.Response:
        rank, offset = int(request.url.params.get("rank", 0)), int(request.url.params["offset"])
        text = b"".join(self.logs.get(rank, [])[: self.poll + 1])
        data = text[offset:]
        return httpx.Response(200, content=data, headers={"X-Next-Offset": str(offset + len(data))})


@pytest.fixture
def api(monkeypatch, tmp_path):
    monkeypatch.setenv("E31_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(follow, "poll_interval", lambda _elapsed: 0)
    fake = FakeApi()
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\ncompute: {gpus: 1}\nwork: {image: python:3.11, command: 'exit 3'}\n")
    return str(path)


def _serve(api: FakeApi, script: Script, created: dict) -> None:
    api.on("POST", "/jobs/", status=201, body=created)
    api.on("GET", "/jobs/5/", script.job)
    api.on("GET", "/jobs/5/logs/", script.log)


def test_watch_prints_the_reason_with_the_outcome(api, spec, capsys):
    script = Script([job("running"), job("released", outcome="failed", message=REASON, log_size=6)],
                    {0: [b"hel", b"lo\n"]})
    _serve(api, script, job("queued"))
    assert main(["submit", "--watch", spec]) == Exit.JOB_FAILED
    out, err = capsys.readouterr()
    assert out == "hello\n"
    assert f"job 5 released · failed ({REASON}); billed 1s, cost $0.01" in err
    assert err.count(REASON) == 1  # once, in the summary: the follow notes do not repeat it


@pytest.mark.parametrize("outcome, message", [
    ("timed_out", "time limit of 1m reached"), ("cancelled", "cancelled while queued"),
    ("failed", "staging failed: data[0]: https://example.org/x answered HTTP 404"),
])
def test_every_outcome_kind_carries_its_words(api, spec, capsys, outcome, message):
    _serve(api, Script([job("released", outcome=outcome, message=message)], {}), job("queued"))
    assert main(["submit", "--watch", spec]) == Exit.JOB_FAILED
    assert f"released · {outcome} ({message})" in capsys.readouterr().err


def test_a_success_has_no_reason(api, spec, capsys):
    _serve(api, Script([job("released", outcome="succeeded")], {}), job("queued"))
    assert main(["submit", "--watch", spec]) == Exit.OK
    err = capsys.readouterr().err
    assert "job 5 released · succeeded; billed 1s" in err and "()" not in err


def test_a_gangs_watch_follows_every_rank_line_by_line_with_its_rank(api, spec, capsys):
    two = {"nodes": 2}
    script = Script([job("running", **two), job("running", **two),
                     job("released", outcome="failed", message=REASON, log_size=14, **two)],
                    {0: [b"r0 one\nr0 t", b"wo\n"], 1: [b"", b"r1 one\n", b"r1 tail"]})
    _serve(api, script, job("queued", **two))
    assert main(["submit", "--watch", spec]) == Exit.JOB_FAILED
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert sorted(lines) == ["[rank 0] r0 one", "[rank 0] r0 two", "[rank 1] r1 one", "[rank 1] r1 tail"]
    assert lines.index("[rank 0] r0 one") < lines.index("[rank 0] r0 two")
    ranks = {c.url.params.get("rank", "0") for c in api.calls if c.url.path.endswith("/logs/")}
    assert ranks == {"0", "1"}
    assert "2 ranks' logs" in err and f"failed ({REASON})" in err


def test_status_shows_the_reason_in_the_state_row(api, capsys):
    api.on("GET", "/jobs/5/", body=job("released", outcome="failed", message=REASON, exit_code=3))
    api.on("GET", "/jobs/5/events/", body=[])
    assert main(["status", "5"]) == Exit.JOB_FAILED
    out = capsys.readouterr().out
    state = next(line for line in out.splitlines() if line.startswith("state"))
    assert f"released · failed ({REASON})" in state and "message" not in out


def test_status_of_a_running_job_keeps_its_progress_words_apart(api, capsys):
    api.on("GET", "/jobs/5/", body=job("running", message="staging data[0]"))
    api.on("GET", "/jobs/5/events/", body=[])
    assert main(["status", "5"]) == Exit.PENDING
    out = capsys.readouterr().out
    assert "staging data[0]" in next(line for line in out.splitlines() if line.startswith("message"))
    assert "running (" not in out


def test_logs_follow_ends_with_the_reason(api, capsys):
    script = Script([job("released", outcome="failed", message=REASON, log_size=3)], {0: [b"hi\n"]})
    api.on("GET", "/jobs/5/", script.job)
    api.on("GET", "/jobs/5/logs/", script.log)
    assert main(["logs", "-f", "5"]) == Exit.JOB_FAILED
    out, err = capsys.readouterr()
    assert out == "hi\n" and f"failed ({REASON})" in err


def test_logs_json_lines_name_the_rank(api, capsys):
    script = Script([job("released", outcome="succeeded", log_size=3)], {0: [b"hi\n"]})
    api.on("GET", "/jobs/5/", script.job)
    api.on("GET", "/jobs/5/logs/", script.log)
    assert main(["--json", "logs", "5"]) == Exit.OK
    assert json.loads(capsys.readouterr().out)["rank"] == 0


def test_rank_lines_hold_a_partial_line_until_its_end_and_flush_on_close():
    written: list[bytes] = []
    lines = RankLines(written.append)
    lines({"attempt": 1, "rank": 1, "data": b"half"})
    lines({"attempt": 1, "rank": 0, "data": b"zero\n"})
    lines({"attempt": 1, "rank": 1, "data": b" done\nstart"})
    assert b"".join(written) == b"[rank 0] zero\n[rank 1] half done\n"
    lines.close()
    assert written[-1] == b"[rank 1] start\n"


def test_rank_lines_start_afresh_on_a_new_attempt_and_cap_a_long_line():
    written: list[bytes] = []
    lines = RankLines(written.append)
    lines({"attempt": 1, "rank": 0, "data": b"lost mid-li"})
    lines({"attempt": 2, "rank": 0, "data": b"again\n"})
    assert written == [b"[rank 0] lost mid-li\n", b"[rank 0] again\n"]
    lines({"attempt": 2, "rank": 1, "data": b"x" * (RankLines.LINE_MAX + 1)})
    assert written[-1] == b"[rank 1] " + b"x" * (RankLines.LINE_MAX + 1) + b"\n"


def test_outcome_text_adds_the_reason_only_once_released():
    assert outcome_text(job("running", message="staging")) == "running"
    assert outcome_text(job("released", outcome="failed", message="a [b]")) == "released · [red]failed[/] (a \\[b])"
