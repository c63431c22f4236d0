"""The spec validator (SPEC §2): field-level errors for every rule."""
import pytest

from apps.core.units import format_duration, parse_duration
from apps.jobs.spec import SpecError, parse_spec

from ..factories import spec


def errors_of(doc, **kw) -> dict:
    with pytest.raises(SpecError) as exc:
        parse_spec(doc, **kw)
    return exc.value.errors


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("45m", 2700), ("8h", 28800), ("1h30m", 5400),
                                          ("2d", 172800), (600, 600), ("600", 600)])
def test_it_parses_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_it_formats_durations():
    assert format_duration(5400) == "1h30m"
    assert format_duration(90) == "1m30s"


def test_it_accepts_the_spec_example():
    doc = {
        "name": "resnet50-finetune",
        "work": {"command": "python train.py --epochs 3", "image": None, "env": {"SEED": "1"}, "kind": "training"},
        "data": [{"source": "https://host/data.tar.gz", "target": "data/", "sha256": None, "extract": True}],
        "compute": {"gpus": 4, "nodes": 1, "gpu_model": ["H100", "A100-80GB"], "gpu_memory_gb": 40, "cpus": 16,
                    "memory_gb": 64, "time_limit": "8h"},
        "output": {"paths": ["checkpoints/**", "metrics.json"], "retention_days": 7},
    }
    parsed = parse_spec(doc)
    assert parsed.compute.time_limit_s == 8 * 3600
    assert parsed.work.env == {"SEED": "1"}


@pytest.mark.parametrize("doc,field", [
    (spec(extra=1), "extra"),
    (spec(work={"command": "x", "bogus": True}), "work.bogus"),
    (spec(name=""), "name"),
    (spec(name="x" * 101), "name"),
    (spec(work={"command": ""}), "work.command"),
    (spec(work={"command": "a\x00b"}), "work.command"),
    (spec(work={"command": "x", "env": {"lower": "1"}}), "work.env"),
    (spec(work={"command": "x", "env": {"A": True}}), "work.env.A"),
    (spec(work={"command": "x", "env": {"A": [1]}}), "work.env.A"),
    (spec(work={"command": "x", "env": {f"K{i}": "v" for i in range(101)}}), "work.env"),
    (spec(work={"command": "x", "kind": "mining"}), "work.kind"),
    (spec(compute={"gpus": 0, "time_limit": "1h"}), "compute.gpus"),
    (spec(compute={"gpus": -1, "time_limit": "1h"}), "compute.gpus"),
    (spec(compute={"gpus": "2", "time_limit": "1h"}), "compute.gpus"),
    (spec(compute={"gpus": True, "time_limit": "1h"}), "compute.gpus"),
    (spec(compute={"gpus": 10**9, "time_limit": "1h"}), "compute.gpus"),
    (spec(compute={"gpus": 1, "nodes": 0, "time_limit": "1h"}), "compute.nodes"),
    (spec(compute={"gpus": 1, "time_limit": "forever"}), "compute.time_limit"),
    (spec(compute={"gpus": 1, "time_limit": 0}), "compute.time_limit"),
    (spec(compute={"gpus": 1, "time_limit": -5}), "compute.time_limit"),
    (spec(compute={"gpus": 1}), "compute.time_limit"),
    (spec(compute={"gpus": 1, "time_limit": "1h", "gpu_memory_gb": -1}), "compute.gpu_memory_gb"),
    (spec(compute={"gpus": 1, "time_limit": "1h", "gpu_model": []}), "compute.gpu_model"),
    (spec(data=[{"source": "ftp://x/y"}]), "data[0].source"),
    (spec(data=[{"source": "https://x/y", "target": "../up"}]), "data[0].target"),
    (spec(data=[{"source": "https://x/y", "target": "/etc"}]), "data[0].target"),
    (spec(data=[{"source": "https://x/y", "sha256": "abc"}]), "data[0].sha256"),
    (spec(data=[{"source": "https://x/y", "extract": "yes"}]), "data[0].extract"),
    (spec(data="https://x"), "data"),
    (spec(output={"paths": ["a/../../b"]}), "output.paths"),
    (spec(output={"paths": ["/abs"]}), "output.paths"),
    (spec(output={"paths": ["ok"], "retention_days": 0}), "output.retention_days"),
    (spec(retry={"attempts": 0}), "retry.attempts"),
    (spec(retry={"attempts": 11}), "retry.attempts"),
    (spec(retry={"on": ["failed"]}), "retry.attempts"),
    (spec(retry={"attempts": 2, "on": ["oom"]}), "retry.on[0]"),
    (spec(retry={"attempts": 2, "on": ["failed", "failed"]}), "retry.on"),
    (spec(retry={"attempts": 2, "on": "failed"}), "retry.on"),
])
def test_it_names_the_bad_field(doc, field):
    errors = errors_of(doc)
    assert field in errors, errors
    assert all(isinstance(m, str) and m for m in errors[field])


def test_it_refuses_a_time_limit_over_the_operator_maximum():
    errors = errors_of(spec(compute={"gpus": 1, "time_limit": "8d"}), time_limit_max_s=7 * 86400)
    assert errors == {"compute.time_limit": ["Is 8d; the most this site allows is 7d."]}


def test_it_refuses_what_is_not_a_mapping():
    assert "spec" in errors_of(["a", "list"])
    assert "spec" in errors_of("text")


def test_it_takes_one_model_as_a_string():
    parsed = parse_spec(spec(compute={"gpus": 1, "time_limit": "1h", "gpu_model": "H100"}))
    assert parsed.compute.gpu_model == ["H100"]


def test_yaml_keeps_times_and_dates_as_text_and_refuses_duplicate_keys():
    from apps.jobs.spec import load_yaml

    assert load_yaml("t: 1:30\nd: 2024-01-01\nn: 12") == {"t": "1:30", "d": "2024-01-01", "n": 12}
    with pytest.raises(SpecError) as exc:
        load_yaml("name: a\nname: b\n")
    assert "duplicate key 'name'" in exc.value.errors["spec"][0]


def test_env_numbers_become_text():
    assert parse_spec(spec(work={"command": "x", "env": {"SEED": 1}})).work.env == {"SEED": "1"}


@pytest.mark.parametrize("targets, clash", [
    (["a", "a/b"], True),      # a file where the other needs a directory
    (["a/b", "a"], True),
    (["a", "./a"], True),      # the same file twice
    (["d/", "d/"], False),     # two sources into one directory
    (["x/y", "x/z"], False),
])
def test_data_targets_that_cannot_all_be_written_are_refused(targets, clash):
    doc = spec(data=[{"source": f"upload:f{i}", "target": t} for i, t in enumerate(targets)])
    if not clash:
        parse_spec(doc)
        return
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert list(err.value.errors) == ["data[1].target"]


def test_work_network_is_egress_unless_none_and_nothing_else():
    assert parse_spec(spec()).work.network == "egress"
    assert parse_spec(spec(work={"command": "true", "network": "none"})).work.network == "none"
    assert "work.network" in errors_of(spec(work={"command": "true", "network": "host"}))
