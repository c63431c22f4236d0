"""The agent's side of secrets (issue 23): values in memory only, into the job's environment through
the shim's pipe, replaced by ``[secret NAME]`` before the log is written; never on disk or a command line."""

import json
import os
import threading
import time

import psutil
import pytest
from e31_agent.models import Assignment
from e31_agent.redactor import Redactor
from e31_agent.runner import JobProcess, build_env, new_marker, supervise
from e31_agent.state import RunState

HF = "hf_live_SECRET_123456"


def _feed_all(redactor: Redactor, pieces: list[bytes]) -> bytes:
    return b"".join(redactor.feed(p) for p in pieces) + redactor.flush()


@pytest.mark.parametrize("cut", range(1, len(HF)))
def test_a_value_split_across_two_reads_is_still_replaced(cut):
    data = f"token={HF} done\n".encode()
    at = data.index(HF.encode()) + cut
    out = _feed_all(Redactor({"HF_TOKEN": HF}), [data[:at], data[at:]])
    assert out == b"token=[secret HF_TOKEN] done\n"


def test_a_value_fed_one_byte_at_a_time_is_replaced_and_nothing_else_is_lost():
    data = f"a {HF} b {HF[:-1]} c {HF}".encode()
    out = _feed_all(Redactor({"HF_TOKEN": HF}), [bytes([b]) for b in data])
    assert out == f"a [secret HF_TOKEN] b {HF[:-1]} c [secret HF_TOKEN]".encode()


def test_only_a_possible_start_of_a_value_is_held_back():
    redactor = Redactor({"HF_TOKEN": HF})
    assert redactor.feed(b"epoch 1 loss 0.5\n") == b"epoch 1 loss 0.5\n"
    assert redactor.feed(b"partial hf_li") == b"partial "
    assert redactor.flush() == b"hf_li"


def test_short_values_are_left_alone_and_the_longer_of_two_wins():
    out = _feed_all(Redactor({"PIN": "12345", "A": "abcdefgh", "AB": "abcdefghij"}), [b"12345 abcdefghij abcdefgh"])
    assert out == b"12345 [secret AB] [secret A]"


def test_the_assignment_keeps_values_out_of_what_is_stored(tmp_path):
    raw = {"job_id": 3, "attempt": 1, "gpus": [], "time_limit_s": 60, "grace_s": 1, "env": {},
           "spec": {"name": "x", "work": {"command": "true", "secrets": ["HF_TOKEN"]},
                    "data": [{"source": "s3://b/x", "credentials": "B"}]},
           "secrets": {"HF_TOKEN": HF}, "credentials": {"B": '{"key": "k", "secret": "s3secretvalue"}'}}
    assignment = Assignment.from_json(raw)
    assert assignment.secrets == {"HF_TOKEN": HF} and assignment.spec.data[0].credentials == "B"
    assert HF not in repr(assignment) and "s3secretvalue" not in repr(assignment)
    state = RunState.create(tmp_path / "runs" / "3-1", assignment.raw, assignment.deadline)
    stored = (state.path / "assignment.json").read_text()
    assert HF not in stored and "s3secretvalue" not in stored
    assert state.load_assignment().secrets == {}  # a resumed run holds none: the shim keeps them


def test_the_shim_gets_the_value_by_pipe_and_the_log_and_disk_never_hold_it(tmp_path):
    job_dir = tmp_path / "jobs" / "7"
    job_dir.mkdir(parents=True)
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[0], marker=new_marker("t", 7, 1))
    log_path = tmp_path / "logs" / "7-1.log"
    command = 'echo "token is $HF_TOKEN"; printf "%s" "$HF_TOKEN" | cut -c1-8; printf "%s" "$HF_TOKEN" >&2; sleep 1'
    proc = JobProcess.start(["/bin/sh", "-c", command], cwd=job_dir, env=env, log_path=log_path,
                            run_dir=tmp_path / "runs" / "7-1", secret_env={"HF_TOKEN": HF})
    time.sleep(0.3)
    for p in [psutil.Process(proc.shim_pid), *psutil.Process(proc.shim_pid).children(recursive=True)]:
        try:
            assert HF not in " ".join(p.cmdline())  # never on a command line
        except psutil.NoSuchProcess:
            pass
    result = supervise(proc, deadline=time.monotonic() + 20, cancel=threading.Event(), drop=threading.Event(),
                        grace_s=1)
    assert result.exit_code == 0
    log = log_path.read_text()
    assert "token is [secret HF_TOKEN]" in log and HF[:8] in log  # a part of it is not the value
    assert log.count("[secret HF_TOKEN]") == 2
    launch = json.loads((tmp_path / "runs" / "7-1" / "launch.json").read_text())
    assert "HF_TOKEN" not in launch["env"] and launch["secrets_on_stdin"] is True
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert HF.encode() not in path.read_bytes(), path


def test_secret_names_reach_a_container_by_name_only(tmp_path):
    from e31_agent import container

    launch = container.wrap(image="busybox", command="echo $HF_TOKEN", runtimes=["podman"], job_dir=tmp_path,
                            env={"HF_TOKEN": HF, "PATH": "/bin"}, gpu_indices=[], real_gpus=False, name="t")
    assert "HF_TOKEN" in launch.argv and not any(HF in a for a in launch.argv)
    assert os.environ.get("HF_TOKEN") != HF



def test_storage_options_anonymous_by_default_credentials_when_named_node_identity_when_allowed(monkeypatch):
    from e31_agent.credentials import CredentialsError, credentials_id, storage_options

    monkeypatch.setenv("E31_DATA_ENDPOINTS_ALLOWED", "e:80")  # the operator's: a plain-HTTP store allowed

    assert storage_options("s3://b/k", None, prefixes=()) == {"anon": True}
    assert storage_options("gs://b/k", None, prefixes=()) == {"token": "anon"}
    assert storage_options("s3://open/k", None, prefixes=("s3://open",)) == {}
    assert storage_options("s3://open-not/k", None, prefixes=("s3://open",)) == {"anon": True}
    creds = '{"key": "k", "secret": "s", "endpoint_url": "http://e", "region_name": "eu-west-1"}'
    assert storage_options("s3://b/k", creds, prefixes=()) == {
        "key": "k", "secret": "s", "endpoint_url": "http://e", "client_kwargs": {"region_name": "eu-west-1"},
        "anon": False}
    monkeypatch.delenv("E31_DATA_ENDPOINTS_ALLOWED")
    with pytest.raises(CredentialsError, match="endpoint_url must be https"):
        storage_options("s3://b/k", creds, prefixes=())
    sa = '{"type": "service_account", "private_key": "pk", "client_email": "a@b"}'
    assert storage_options("gs://b/k", sa, prefixes=())["token"]["client_email"] == "a@b"
    assert storage_options("https://h/k", None) == {}
    assert credentials_id(creds) == credentials_id(creds) != credentials_id(sa)
    assert len(credentials_id(creds)) == 64
    assert credentials_id(None) is None


def test_every_secret_leaves_the_environment_a_file_would_keep_even_one_named_like_apptainers_prefix():
    from e31_agent.job.launch import secret_env_split

    env = {"PATH": "/bin", "HF_TOKEN": "v1", "APPTAINERENV_HF_TOKEN": "v1", "APPTAINERENV_X": "v2",
           "APPTAINERENV_APPTAINERENV_X": "v2", "X": "not-a-secret"}
    taken = secret_env_split(env, {"HF_TOKEN", "APPTAINERENV_X"})
    assert taken == {"HF_TOKEN": "v1", "APPTAINERENV_HF_TOKEN": "v1", "APPTAINERENV_X": "v2",
                     "APPTAINERENV_APPTAINERENV_X": "v2"}
    assert env == {"PATH": "/bin", "X": "not-a-secret"}
