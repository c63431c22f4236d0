"""Images for real (issue 23 item 4): a private image in Debian's ``docker-registry`` behind htpasswd,
built here with ``buildah`` from ``busybox-static``, pulled by a real agent with podman (runc) before
the launch. Its login comes from ``work.image_credentials``; without it, or with an unknown tag, the
attempt fails within seconds with the registry's reason; an image the node holds is not pulled again for
a login the registry let pull it, and is no right to run it for a job without one."""

from __future__ import annotations

import time

import pytest
from e31_agent import images
from e31_agent.models import PrestageOffer

from .registry import image_job, public_registry, registry  # noqa: F401
from .test_agent import bundle_files, exited_of, node, offer  # noqa: F401


def staging_words(server, job_id: int) -> list[str]:
    return [r.get("message", "") for r in server.state.reports[job_id] if r["type"] == "staging"]


def test_a_private_image_runs_with_its_login_and_is_not_pulled_twice(node, registry, monkeypatch):  # noqa: F811
    monkeypatch.setenv("E31_INSECURE_REGISTRIES", registry)
    server, _agent, _workdir = node
    image = f"{registry}/e31/busy:1"
    offer(server, image_job(60, image, login=True))
    assert server.state.wait_for(lambda: "finished" in server.state.types(60), 60)
    assert exited_of(server, 60)["reason"] == "exit", server.state.reports[60]
    files = bundle_files(server, 60)
    assert files["out.txt"] == b"inside\n"
    assert files["uid.txt"].strip() != b"0"  # the slot user, not root
    assert staging_words(server, 60) == [f"pulling image {image}"]
    offer(server, image_job(61, image, login=True))  # held, and this login was let pull it: no pull
    assert server.state.wait_for(lambda: "finished" in server.state.types(61), 60)
    assert exited_of(server, 61)["reason"] == "exit" and staging_words(server, 61) == []


def test_a_held_private_image_is_no_right_to_run_it(node, registry, monkeypatch):  # noqa: F811
    """Another tenant naming a private image the node holds, without its login, gets the registry's
    refusal (the held layers are not theirs), as a first pull would."""
    monkeypatch.setenv("E31_INSECURE_REGISTRIES", registry)
    server, _agent, _workdir = node
    image = f"{registry}/e31/busy:1"
    offer(server, image_job(64, image, login=True))
    assert server.state.wait_for(lambda: "finished" in server.state.types(64), 60)
    assert exited_of(server, 64)["reason"] == "exit"
    offer(server, image_job(65, image, login=False))
    assert server.state.wait_for(lambda: "finished" in server.state.types(65), 30)
    exited = exited_of(server, 65)
    assert exited["reason"] == "staging_failed", server.state.reports[65]
    assert "unauthorized: authentication required" in exited["message"]
    assert staging_words(server, 65) == [f"checking access to image {image}"]


@pytest.mark.parametrize("tag, login, reason", [("2", True, "manifest unknown"),
                                                ("3", False, "unauthorized: authentication required")])
def test_a_pull_that_fails_ends_the_attempt_within_seconds_with_the_registry_s_reason(
        node, registry, monkeypatch, tag, login, reason):  # noqa: F811
    monkeypatch.setenv("E31_INSECURE_REGISTRIES", registry)
    server, _agent, _workdir = node
    offer(server, image_job(62, f"{registry}/e31/busy:{tag}", login=login))
    started = time.monotonic()
    assert server.state.wait_for(lambda: "finished" in server.state.types(62), 30)
    assert time.monotonic() - started < 10
    exited = exited_of(server, 62)
    assert exited["reason"] == "staging_failed" and exited["message"].startswith("image pull failed: ")
    assert reason in exited["message"]


def test_a_queued_jobs_public_image_is_pulled_before_its_rent_and_not_again_at_its_start(
        node, public_registry, monkeypatch):  # noqa: F811
    """Pre-pull (issue 23 item 4): the server's pre-stage offer names the image of a job planned here;
    the agent pulls it, meter off, while the job waits; at the start the image is held and public,
    so the job pulls nothing."""
    monkeypatch.setenv("E31_INSECURE_REGISTRIES", public_registry)
    _server, agent, _workdir = node
    image = f"{public_registry}/e31/pub:1"
    assert not images.image_present("podman", image)

    def until(predicate, timeout_s: float = 30) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.1)
        return predicate()

    assert until(lambda: agent.prestager is not None)  # registered
    assert agent.prestager.runtime == "podman"
    agent.prestager.update([PrestageOffer(job_id=66, data=[], image=image)])
    assert until(lambda: images.image_present("podman", image))
    server = node[0]
    offer(server, image_job(66, image, login=False))
    assert server.state.wait_for(lambda: "finished" in server.state.types(66), 60)
    assert exited_of(server, 66)["reason"] == "exit" and staging_words(server, 66) == []
    assert bundle_files(server, 66)["out.txt"] == b"inside\n"
