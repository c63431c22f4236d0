"""Run every example job in examples/ the way a node would, on the CPU.

For each examples/<name>/job.yaml: stage the files its `data` lists into an
empty directory, run `work.command` with /bin/sh -c there (the test's Python
first on PATH, the spec's env plus the E31_* variables), and check that it
exits 0 within 60 s and that every `output.paths` glob matches a file.
Plain pytest: no Django, no database.
"""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPECTED = {"training", "inference", "processing", "simulation"}
MULTI_NODE = {"multinode"}  # a gang's example: kind training, nodes 2; run here as a gang of one
TOP_LEVEL = {"name", "work", "data", "compute", "output"}
KINDS = {"training", "inference", "processing", "simulation", "other"}
TIME_LIMIT = re.compile(r"^(\d+|(\d+d)?(\d+h)?(\d+m)?(\d+s)?)$")
ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
RUN_TIMEOUT_S = 60
EXAMPLE_DEPS = ("numpy", "sklearn", "matplotlib", "PIL")  # the `examples` extra


def require_example_deps() -> None:
    for module in EXAMPLE_DEPS:
        pytest.importorskip(module, reason="install the `examples` extra to run the examples")


def example_dirs() -> list:
    return sorted(p.parent for p in EXAMPLES.glob("*/job.yaml"))


def load_spec(example: Path) -> dict:
    return yaml.safe_load((example / "job.yaml").read_text())


def stage(example: Path, spec: dict, job_dir: Path) -> None:
    for item in spec["data"]:
        name = item["source"].removeprefix("upload:")
        shutil.copyfile(example / name, job_dir / item["target"])


def check_relative(path: str) -> None:
    assert path and "\0" not in path, path
    assert not path.startswith("/"), path
    assert ".." not in Path(path).parts, path


def test_all_four_examples_present():
    assert {p.name for p in example_dirs()} >= EXPECTED


@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_job_yaml_is_a_valid_spec(example: Path):
    text = (example / "job.yaml").read_text()
    assert text.startswith("# "), "job.yaml should open with a one-line comment"
    spec = yaml.safe_load(text)
    assert isinstance(spec, dict)
    assert set(spec) - {"array"} == TOP_LEVEL
    assert isinstance(spec.get("array", 1), int) and 1 <= spec.get("array", 1) <= 100

    assert isinstance(spec["name"], str) and 1 <= len(spec["name"]) <= 100
    work = spec["work"]
    assert set(work) <= {"command", "image", "env", "kind"}
    assert isinstance(work["command"], str) and work["command"].strip()
    assert work["kind"] in KINDS and (work["kind"] == example.name or example.name in MULTI_NODE)
    env = work.get("env") or {}
    assert len(env) <= 100
    for key, value in env.items():
        assert ENV_KEY.match(key), key
        assert isinstance(value, str), f"env {key} must be a string"

    assert isinstance(spec["data"], list) and spec["data"]
    for item in spec["data"]:
        assert set(item) <= {"source", "target", "sha256", "extract"}
        assert item["source"].startswith("upload:"), item
        name = item["source"].removeprefix("upload:")
        assert "/" not in name and item["target"] == name, "keep example files flat"
        check_relative(item["target"])
        assert (example / name).is_file(), f"{name} is listed in data but missing"
        if item.get("sha256"):
            digest = hashlib.sha256((example / name).read_bytes()).hexdigest()
            assert digest == item["sha256"], f"sha256 of {name} does not match job.yaml"
    scripts = {p.name for p in example.glob("*.py")}
    command_files = set(re.findall(r"[\w.-]+\.py", work["command"]))
    assert command_files and command_files <= {i["target"] for i in spec["data"]} & scripts

    compute = spec["compute"]
    assert set(compute) <= {
        "gpus",
        "nodes",
        "gpu_model",
        "gpu_memory_gb",
        "cpus",
        "memory_gb",
        "time_limit",
        "mixed_models",
    }
    assert isinstance(compute["gpus"], int) and 1 <= compute["gpus"] <= 4
    assert compute.get("nodes", 1) == (2 if example.name in MULTI_NODE else 1)
    assert "gpu_model" not in compute
    assert TIME_LIMIT.match(str(compute["time_limit"])), compute["time_limit"]

    output = spec["output"]
    assert set(output) <= {"paths", "retention_days"}
    assert output["paths"]
    for pattern in output["paths"]:
        check_relative(pattern)


@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_example_runs_and_writes_its_outputs(example: Path, tmp_path: Path):
    require_example_deps()
    spec = load_spec(example)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    stage(example, spec, job_dir)

    env = dict(os.environ)
    env.update(spec["work"].get("env") or {})
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "CUDA_VISIBLE_DEVICES": "0",
            "E31_JOB_ID": "1",
            "E31_NODE_RANK": "0",
            "E31_NUM_NODES": "1",
            "MPLBACKEND": env.get("MPLBACKEND", "Agg"),
        }
    )
    started = time.monotonic()
    proc = subprocess.run(
        ["/bin/sh", "-c", spec["work"]["command"]],
        cwd=job_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    elapsed = time.monotonic() - started
    print(f"{example.name}: {elapsed:.2f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < RUN_TIMEOUT_S
    assert "E31_JOB_ID=1" in proc.stdout, "jobs print their E31 environment at start"

    for pattern in spec["output"]["paths"]:
        matches = [
            m
            for m in glob.glob(pattern, root_dir=job_dir, recursive=True)
            if (job_dir / m).is_file()
        ]
        assert matches, f"output glob {pattern!r} matched no file"


def test_shipped_inference_model_is_reproducible(tmp_path: Path):
    """make_model.py regenerates (numerically) the model.npz that is shipped."""
    require_example_deps()
    import numpy as np

    example = EXAMPLES / "inference"
    shipped = example / "model.npz"
    assert shipped.stat().st_size < 200_000
    out = tmp_path / "model.npz"
    subprocess.run(
        [sys.executable, str(example / "make_model.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
    )
    with np.load(shipped, allow_pickle=False) as a, np.load(out, allow_pickle=False) as b:
        assert set(a.files) == set(b.files)
        for key in a.files:
            if a[key].dtype.kind == "f":
                np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)
            elif key != "trained_with":
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_simulation_is_an_array_whose_tasks_cover_the_grid_once(tmp_path: Path):
    """Each task of the simulation's array runs its share of the beta values
    (E31_ARRAY_INDEX, E31_ARRAY_SIZE); together they make the whole sweep."""
    require_example_deps()
    example = EXAMPLES / "simulation"
    spec = load_spec(example)
    size = spec["array"]
    assert size > 1
    rows: list[tuple[str, str]] = []
    for index in (0, size - 1):  # the first and the last task: enough to check the split
        job_dir = tmp_path / f"task-{index}"
        job_dir.mkdir()
        stage(example, spec, job_dir)
        env = {**os.environ, **spec["work"]["env"], "E31_JOB_ID": str(10 + index), "E31_ARRAY_INDEX": str(index),
               "E31_ARRAY_SIZE": str(size), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        proc = subprocess.run(["/bin/sh", "-c", spec["work"]["command"]], cwd=job_dir, env=env,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"E31_ARRAY_INDEX={index}" in proc.stdout and f"array task {index} of {size}" in proc.stdout
        with open(job_dir / "results.csv") as fh:
            rows += [tuple(line.split(",")[:2]) for line in fh.read().splitlines()[1:]]
    betas = sorted({float(b) for b, _ in rows})
    command = spec["work"]["command"]
    start, stop, count = (float(x) for x in re.search(r"--beta (\S+)", command).group(1).split(":"))
    grid = [start + (stop - start) * k / (count - 1) for k in range(int(count))]
    expected = sorted(grid[0::size] + grid[size - 1::size])
    assert betas == pytest.approx(expected, abs=1e-4)
    assert len(rows) == len(set(rows))
