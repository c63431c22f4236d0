"""Container launches: the command line each runtime gets."""

from pathlib import Path

import pytest
from e31_agent.container import ContainerError, plain, wrap

ENV = {"PATH": "/host/bin", "HOME": "/host", "SEED": "1", "CUDA_VISIBLE_DEVICES": "2,3"}


def _wrap(runtimes, real_gpus=True):
    return wrap(
        image="pytorch/pytorch:2.3",
        command="python train.py",
        runtimes=runtimes,
        job_dir=Path("/w/jobs/5"),
        env=ENV,
        gpu_indices=[2, 3],
        real_gpus=real_gpus,
        name="e31-x-5-1",
    )


def test_no_image_runs_the_shell():
    assert plain("echo hi").argv == ["/bin/sh", "-c", "echo hi"]


def test_docker_gets_the_leased_gpus_and_env_by_name():
    launch = _wrap(["docker", "apptainer"])
    argv = launch.argv
    assert argv[:2] == ["docker", "run"] and "--rm" in argv
    assert argv[argv.index("--gpus") + 1] == "device=2,3"
    assert argv[argv.index("-v") + 1] == "/w/jobs/5:/job"
    assert "SEED" in argv and "1" not in argv  # values travel in the environment only
    assert "PATH" not in argv  # the image keeps its own PATH
    assert argv[-4:] == ["pytorch/pytorch:2.3", "/bin/sh", "-c", "python train.py"]
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1"  # renumbered inside
    assert launch.teardown == ["docker", "rm", "-f", "e31-x-5-1"]


def test_simulated_gpus_are_not_passed_to_the_container():
    launch = _wrap(["podman"], real_gpus=False)
    assert launch.argv[0] == "podman" and "--device" not in launch.argv
    assert "CUDA_VISIBLE_DEVICES" not in launch.env


def test_apptainer_runs_in_the_job_group():
    launch = _wrap(["apptainer"])
    assert launch.argv[:2] == ["apptainer", "exec"] and "--nv" in launch.argv
    assert "docker://pytorch/pytorch:2.3" in launch.argv
    assert launch.env["APPTAINERENV_SEED"] == "1"
    assert launch.teardown is None


def test_no_runtime_no_image():
    with pytest.raises(ContainerError, match="needs docker"):
        _wrap([])
