"""Container launches: the command line each runtime gets."""

from pathlib import Path

import pytest
from e31_agent.container import GRACE_WRAPPER, ContainerError, plain, wrap

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
    assert argv[-5:] == ["pytorch/pytorch:2.3", "/bin/sh", "-c", GRACE_WRAPPER, "python train.py"]
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


def test_sandboxed_docker_runs_as_the_slot_user_without_capabilities_or_network():
    launch = wrap(image="alpine", command="id", runtimes=["docker"], job_dir=Path("/w/jobs/5"), env=ENV,
                  gpu_indices=[], real_gpus=False, name="e31-x-5-1", slot_user="@E31_SLOT_UID@:@E31_SLOT_GID@",
                  network="none")
    argv = launch.argv
    assert argv[argv.index("--user") + 1] == "@E31_SLOT_UID@:@E31_SLOT_GID@"
    assert {"--cap-drop=ALL", "--security-opt=no-new-privileges", "--network=none"} <= set(argv)


def test_sandboxed_podman_egress_has_no_host_loopback_and_apptainer_drops_to_the_slot_user():
    podman = wrap(image="alpine", command="id", runtimes=["podman"], job_dir=Path("/w/jobs/5"), env=ENV,
                  gpu_indices=[], real_gpus=False, name="n", slot_user="7:8", network="egress")
    assert "--network=slirp4netns:allow_host_loopback=false" in podman.argv
    app = wrap(image="alpine", command="id", runtimes=["apptainer"], job_dir=Path("/w/jobs/5"), env=ENV,
               gpu_indices=[], real_gpus=False, name="n", slot_user="7:8", network="none")
    assert app.argv[:3] == ["setpriv", "--reuid=7", "--regid=8"]
    assert {"--containall", "--no-privs"} <= set(app.argv) and app.argv[-6:-4] == ["--network", "none"] or \
        "none" in app.argv
