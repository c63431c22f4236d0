"""The shipped alert rules and dashboard (deploy/): valid for Prometheus' own ``promtool`` (Debian's
``prometheus`` package, which ``.ci/run`` installs), firing as meant, and naming only series that
``/metrics`` exports."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL:
        pytest.fail("promtool is not installed: apt-get install -y prometheus (.ci/run does it)")
    return subprocess.run([PROMTOOL, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_alert_rules():
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


def test_each_alert_fires_when_meant_and_not_before():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_rules_and_dashboard_name_only_exported_series(client, settings, pool):
    settings.E31_METRICS_TOKEN = "t"
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    suffixes = {"counter": ("",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    exported = {name + suffix for name, kind in re.findall(r"^# TYPE (e31_\w+) (\w+)$", text, re.M)
                for suffix in suffixes[kind]}  # the sample names a query sees, samples or not
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    dashboard = json.dumps(json.loads((DEPLOY / "grafana" / "e31-dashboard.json").read_text()))
    named = set(re.findall(r"\be31_[a-z_]+", rules + dashboard)) - {"e31_metrics_token"}
    assert named and named <= exported, named - exported


@pytest.mark.django_db
def test_every_exported_series_is_in_the_deploy_docs_table(client, settings, pool):
    """docs/deploy.md's series table is what an operator builds dashboards from: a series added to
    /metrics without its row there is one nobody finds."""
    settings.E31_METRICS_TOKEN = "t"
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    families = set(re.findall(r"^# TYPE (e31_\w+) \w+$", text, re.M))
    docs = (DEPLOY.parent / "docs" / "deploy.md").read_text()
    documented = set(re.findall(r"`(e31_\w+)[{`]", docs))
    # counters are exposed as <name>_total; the table names them so
    missing = {f for f in families if f not in documented and f"{f}_total" not in documented
               and f.removesuffix("_total") not in documented}
    assert families and not missing, missing
