"""``e31 price`` against a stand-in API (tests/cli/fake_api.py): the quote per GPU model (issue 29
item 4) is printed soonest first, beside the worst case."""
from __future__ import annotations

import time

from e31_cli.errors import Exit
from e31_cli.main import main

QUOTE = {"dry_run": True, "valid": True, "worst_case": "5.10", "gpus": 2, "time_limit": "1h", "tasks": 1,
         "by_model": [{"gpu_model": "A100-80GB", "rate_per_gpu_hour": "1.60", "worst_case": "3.20"},
                      {"gpu_model": "H100-80GB", "rate_per_gpu_hour": "2.55", "worst_case": "5.10"}],
         "spend_limit": {"limit": None, "fits": True},
         "quotes": [{"gpu_model": "A100-80GB", "estimated_start_at": "2026-12-07T10:00:00+00:00",
                     "latest_start_at": "2026-12-07T10:05:00+00:00", "worst_case": "3.20"},
                    {"gpu_model": "H100-80GB", "estimated_start_at": None, "latest_start_at": None,
                     "worst_case": "5.10"}]}


def test_price_prints_when_the_job_would_start_on_each_model(fake_api, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()  # the CLI prints local times
    (tmp_path / "job.yaml").write_text("name: x\nwork: {command: 'true'}\ncompute: {gpus: 2, time_limit: 1h}\n")
    fake_api.on("POST", "/jobs/", body=QUOTE)
    assert main(["price", str(tmp_path / "job.yaml")]) == Exit.OK
    assert fake_api.calls[0].url.params["dry_run"] == "1"
    out = capsys.readouterr().out
    lines = [line for line in out[out.index("When it would start"):].splitlines() if "-80GB" in line]
    assert lines[0].split()[:6] == ["A100-80GB", "2026-12-07", "10:00:00", "2026-12-07", "10:05:00", "$3.20"]
    assert lines[1].split()[:3] == ["H100-80GB", "cannot", "start"]
