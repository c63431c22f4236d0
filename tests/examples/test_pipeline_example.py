"""examples/pipeline: a three-step pipeline file (preprocess, train as an array of 4, evaluate after it).

The file is read with the command line's own reader (``e31_cli.pipeline``, as ``e31 submit`` reads
it), each step is checked as test_examples_run checks a job.yaml, and the steps run in order the way
nodes would run them: staged files, ``/bin/sh -c``, the spec's env plus the ``E31_*`` variables (the
train step once per task). ``FAIL_TASK`` makes one task fail, which is what releases evaluate
``cancelled`` on a live site. Plain pytest: no Django, no database.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e31_cli.pipeline import Submitted, read_pipeline, step_document
from e31_cli.specfile import read_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline"
STEP_KEYS = {"name", "work", "data", "compute", "output", "array", "after"}
RUN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def pipeline():
    return read_pipeline(read_spec(EXAMPLE / "pipeline.yaml"))


def test_it_has_three_steps_train_an_array_of_four_after_preprocess_and_evaluate_after_train(pipeline):
    assert (EXAMPLE / "pipeline.yaml").read_text().startswith("# ")
    assert [s.name for s in pipeline.steps] == ["preprocess", "train", "evaluate"]
    preprocess, train, evaluate = pipeline.steps
    assert train.document["array"] == 4 and "array" not in evaluate.document
    assert train.needs() == ["preprocess"] and evaluate.needs() == ["train"]
    assert evaluate.document["after"][0].get("when", "succeeded") == "succeeded"
    assert "FAIL_TASK" in train.document["work"]["env"]


def test_each_step_is_a_spec_with_its_files_beside_the_pipeline(pipeline):
    for step in pipeline.steps:
        doc = step.document
        assert set(doc) <= STEP_KEYS, step.name
        assert set(doc["work"]) <= {"command", "env", "kind"}
        assert all(isinstance(v, str) for v in doc["work"].get("env", {}).values())
        assert doc["compute"]["gpus"] == 1 and "gpu_model" not in doc["compute"]
        assert [name for name, _ in step.attachments] == ["steps.py"]
        assert all(i["target"] == i["source"].removeprefix("upload:") for i in doc["data"])


def test_the_steps_wait_for_the_job_and_the_array_the_steps_above_were_submitted_as(pipeline):
    done = {"preprocess": Submitted("preprocess", "job", 41, "linefit-preprocess", [41]),
            "train": Submitted("train", "array", 7, "linefit-train", [42, 43, 44, 45])}
    train = step_document(pipeline.steps[1], done, pipeline=pipeline.name)
    evaluate = step_document(pipeline.steps[2], done, pipeline=pipeline.name)
    assert train["name"] == "linefit-train" and train["after"] == [{"job": 41}]
    assert evaluate["after"] == [{"array": 7, "when": "succeeded"}]


def _run(pipeline, step_name: str, job_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    step = next(s for s in pipeline.steps if s.name == step_name)
    job_dir.mkdir(parents=True, exist_ok=True)
    for item in step.document["data"]:
        shutil.copyfile(EXAMPLE / item["source"].removeprefix("upload:"), job_dir / item["target"])
    environ = {**os.environ, **step.document["work"].get("env", {}), "E31_JOB_ID": "1", "E31_NODE_RANK": "0",
               "E31_NUM_NODES": "1", "CUDA_VISIBLE_DEVICES": "0",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    return subprocess.run(["/bin/sh", "-c", step.document["work"]["command"]], cwd=job_dir, env=environ,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def _outputs_match(pipeline, step_name: str, job_dir: Path) -> None:
    step = next(s for s in pipeline.steps if s.name == step_name)
    for pattern in step.document["output"]["paths"]:
        assert [m for m in glob.glob(pattern, root_dir=job_dir, recursive=True) if (job_dir / m).is_file()], pattern


def test_the_steps_run_in_order_and_write_their_outputs(pipeline, tmp_path):
    proc = _run(pipeline, "preprocess", tmp_path / "preprocess")
    assert proc.returncode == 0, proc.stderr
    assert "E31_JOB_ID=1" in proc.stdout
    _outputs_match(pipeline, "preprocess", tmp_path / "preprocess")
    size = pipeline.steps[1].document["array"]
    folds = []
    for index in range(size):
        job_dir = tmp_path / f"train-{index}"
        proc = _run(pipeline, "train", job_dir, E31_ARRAY_INDEX=str(index), E31_ARRAY_SIZE=str(size))
        assert proc.returncode == 0, proc.stderr
        assert f"array task {index} of {size}" in proc.stdout
        _outputs_match(pipeline, "train", job_dir)
        folds.append(json.loads((job_dir / "result.json").read_text()))
    assert sorted(f["fold"] for f in folds) == list(range(size))
    assert sum(f["held_out"] for f in folds) == 400  # the folds cover the points once
    proc = _run(pipeline, "evaluate", tmp_path / "evaluate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _outputs_match(pipeline, "evaluate", tmp_path / "evaluate")
    assert json.loads((tmp_path / "evaluate" / "report.json").read_text())["passed"] is True


def test_fail_task_makes_that_task_alone_fail(pipeline, tmp_path):
    failed = _run(pipeline, "train", tmp_path / "t2", E31_ARRAY_INDEX="2", E31_ARRAY_SIZE="4", FAIL_TASK="2")
    assert failed.returncode == 3 and "fails on purpose" in failed.stderr
    assert not (tmp_path / "t2" / "result.json").exists()
    other = _run(pipeline, "train", tmp_path / "t1", E31_ARRAY_INDEX="1", E31_ARRAY_SIZE="4", FAIL_TASK="2")
    assert other.returncode == 0
