"""Job arrays (SPEC §2 ``array``): N tasks in one submit, their env, counts, cancel, pages."""
import json
import threading
from decimal import Decimal

import pytest
from django.test import Client

from apps.agent_api.selectors import agent_work_for
from apps.core.models import AccountProfile
from apps.jobs.arrays import array_cancel, array_submit
from apps.jobs.models import Job, JobArray, JobEvent
from apps.metering.models import Lease
from apps.scheduling.adapter import schedule_cycle

from ..drive import Agent
from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db


def _web(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_submits_an_array_and_answers_201_with_its_id_and_job_ids(api, pool):
    resp = api.post("/api/v1/jobs/", spec(name="sweep", array=5), format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    array = JobArray.objects.get(pk=body["array_id"])
    assert body["id"] == array.pk and body["size"] == 5 and body["name"] == "sweep"
    assert body["counts"]["queued"] == 5 and body["url"].endswith(f"/api/v1/arrays/{array.pk}/")
    jobs = list(Job.objects.filter(array=array).order_by("array_index"))
    assert body["job_ids"] == [job.pk for job in jobs]
    assert [job.array_index for job in jobs] == [0, 1, 2, 3, 4]
    assert all(job.state == "queued" and job.event_seq == 1 and "array" not in job.spec for job in jobs)
    assert JobEvent.objects.filter(job__array=array, seq=1, to_state="queued").count() == 5
    one = api.get(f"/api/v1/jobs/{jobs[3].pk}/").json()
    assert (one["array_id"], one["array_index"]) == (array.pk, 3)
    tasks = api.get(f"/api/v1/jobs/?array={array.pk}").json()
    assert [t["array_index"] for t in tasks["results"]] == [0, 1, 2, 3, 4]
    assert api.get(f"/api/v1/arrays/{array.pk}/").json()["counts"]["queued"] == 5
    assert api.get("/api/v1/arrays/").json()["results"][0]["id"] == array.pk


def test_a_plain_job_has_no_array(api, pool):
    body = api.post("/api/v1/jobs/", spec(), format="json").json()
    assert (body["array_id"], body["array_index"]) == (None, None)


@pytest.mark.parametrize("size", [0, 10_001, -1, "many", True])
def test_it_refuses_an_array_out_of_range_naming_the_field(api, pool, size):
    resp = api.post("/api/v1/jobs/", spec(array=size), format="json")
    assert resp.status_code == 400
    assert list(resp.json()) == ["array"]
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_the_largest_array_is_accepted(owner, pool):
    submitted = array_submit(owner=owner, document=spec(array=10_000))
    assert len(submitted.job_ids) == 10_000
    assert Job.objects.filter(array=submitted.array).count() == 10_000


def test_one_spend_limit_check_covers_the_whole_array(api, owner, pool):
    """Worst case of N tasks, not of one: 1 GPU x 10 min at ~$2-4/h is about $0.5 a task."""
    AccountProfile.objects.update_or_create(owner=owner, defaults={"monthly_spend_limit": Decimal("5")})
    quote = api.post("/api/v1/jobs/?dry_run=1", spec(array=100), format="json").json()
    assert quote["tasks"] == 100 and not quote["spend_limit"]["fits"]
    resp = api.post("/api/v1/jobs/", spec(array=100), format="json")
    assert resp.status_code == 400 and "compute" in resp.json()
    assert api.post("/api/v1/jobs/", spec(array=2), format="json").status_code == 201


def test_a_stranger_gets_404_for_the_array_and_its_cancel(api, stranger_api, pool):
    array_id = api.post("/api/v1/jobs/", spec(array=3), format="json").json()["array_id"]
    assert stranger_api.get(f"/api/v1/arrays/{array_id}/").status_code == 404
    assert stranger_api.post(f"/api/v1/arrays/{array_id}/cancel/").status_code == 404
    assert stranger_api.get(f"/api/v1/jobs/?array={array_id}").status_code == 404
    assert Job.objects.filter(array_id=array_id, state="queued").count() == 3


@pytest.mark.parametrize(("value", "code"), [("9223372036854775808", 404), ("-1", 404), ("0", 404),
                                              ("99999999999999999999999", 404), ("abc", 400)])
def test_an_array_filter_that_names_no_array_is_a_clear_4xx(api, value, code):
    resp = api.get(f"/api/v1/jobs/?array={value}")
    assert resp.status_code == code, resp.content
    if code == 400:
        assert "array" in resp.json()


@pytest.mark.parametrize("word", ["on", "abc", "2"])
def test_a_dry_run_flag_it_does_not_know_is_refused_and_submits_nothing(api, pool, word):
    resp = api.post(f"/api/v1/jobs/?dry_run={word}", spec(), format="json")
    assert resp.status_code == 400 and "dry_run" in resp.json()
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_the_whole_array_queued_and_running(api, owner, pool):
    """6 GPUs in the pool: 6 tasks rent at once, the other 4 wait; cancel ends all 10."""
    resp = api.post("/api/v1/jobs/", spec(array=10), format="json")
    array = JobArray.objects.get(pk=resp.json()["array_id"])
    holding = Job.objects.filter(array=array, state="rented").count()
    assert holding == 6
    resp = api.post(f"/api/v1/arrays/{array.pk}/cancel/")
    assert resp.status_code == 200
    assert (resp.json()["released"], resp.json()["stopping"]) == (4, 6)
    queued = Job.objects.filter(array=array, rented_at__isnull=True)
    assert {(j.state, j.outcome, j.end_reason) for j in queued} == {("released", "cancelled", "cancelled")}
    assert all(j.event_seq == 2 and j.events.last().detail.startswith("cancelled") for j in queued)
    assert Job.objects.filter(array=array, state="rented", cancel_requested_at__isnull=False).count() == 6
    again = api.post(f"/api/v1/arrays/{array.pk}/cancel/").json()  # idempotent
    assert (again["released"], again["stopping"]) == (0, 0)
    assert api.get(f"/api/v1/arrays/{array.pk}/").json()["cancel_requested_at"]


def test_the_work_answer_carries_each_tasks_index_and_size(owner, pool):
    submitted = array_submit(owner=owner, document=spec(array=3))
    schedule_cycle()
    tasks = {a["job_id"]: a for node in pool for a in agent_work_for(node)["assignments"]}
    assert {(tasks[pk]["array_index"], tasks[pk]["array_size"]) for pk in submitted.job_ids} == {
        (0, 3), (1, 3), (2, 3)}


def test_the_agent_puts_index_and_size_in_the_jobs_environment(owner, pool, tmp_path):
    """The server's own work answer, run by a real agent (against the agent tests' fake server)."""
    from apps.scheduling.adapter import schedule_cycle

    from ..agent.fake_server import TOKEN, FakeServer

    command = "echo index=$E31_ARRAY_INDEX size=$E31_ARRAY_SIZE job=$E31_JOB_ID"
    submitted = array_submit(owner=owner, document=spec(array=2, work={"command": command}))
    schedule_cycle()
    task = next(a for node in pool for a in agent_work_for(node)["assignments"]
                if a["job_id"] == submitted.job_ids[1])
    task = json.loads(json.dumps(task, default=str))

    from e31_agent.agent import Agent
    from e31_agent.config import AgentConfig

    with FakeServer() as server:
        agent = Agent(AgentConfig(server=server.url, token=TOKEN, workdir=tmp_path / "w",
                                  simulate="8xH100-80GB", shutdown_grace_s=1))
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        try:
            with server.state.lock:
                server.state.assignments.append(task)
                server.state.lock.notify_all()
            assert server.state.wait_for(lambda: "finished" in server.state.types(task["job_id"]), 30)
            log = bytes(server.state.logs[(task["job_id"], 1)]).decode()
        finally:
            agent.stop()
            thread.join(20)
    assert log.strip() == f"index=1 size=2 job={task['job_id']}"


def test_my_jobs_shows_an_array_as_one_row_with_counts(owner):
    node_with_gpus("n3", count=3)  # room for 3 tasks at once
    submitted = array_submit(owner=owner, document=spec(name="sir-sweep", array=40))
    schedule_cycle()
    for job in Job.objects.filter(array=submitted.array, state="rented"):
        Agent(job).start()  # 3 running, as their agents report it
    single = array_submit(owner=owner, document=spec(name="solo", array=1)).array
    client = _web(owner)
    html = client.get("/").content.decode()
    assert html.count('id="array-row-') == 2 and html.count('id="job-row-') == 0
    assert f'id="array-row-{submitted.array.pk}"' in html and f'id="array-row-{single.pk}"' in html
    assert "37 queued" in html and "3 running" in html and "40 tasks" in html
    # one state: the tasks one by one
    assert client.get("/?state=running").content.decode().count('id="job-row-') == 3
    page = client.get(f"/arrays/{submitted.array.pk}/").content.decode()
    assert page.count('id="job-row-') == 40 and "Cancel the array" in page
    assert client.get(f"/arrays/{submitted.array.pk}/?page=2").status_code == 200


def test_the_array_page_and_its_cancel_are_404_for_a_stranger(owner, stranger, pool):
    array = array_submit(owner=owner, document=spec(array=2)).array
    client = _web(stranger)
    assert client.get(f"/arrays/{array.pk}/").status_code == 404
    assert client.get(f"/arrays/{array.pk}/cancel/").status_code == 404
    assert client.post(f"/arrays/{array.pk}/cancel/").status_code == 404
    assert Job.objects.filter(array=array, state="queued").count() == 2


def test_the_cancel_button_cancels_the_array(owner, pool):
    array = array_submit(owner=owner, document=spec(array=3)).array
    client = _web(owner)
    confirm = client.get(f"/arrays/{array.pk}/cancel/").content.decode()
    assert "3 queued tasks leave the queue" in confirm
    resp = client.post(f"/arrays/{array.pk}/cancel/", follow=True)
    assert resp.status_code == 200 and "3 queued tasks released" in resp.content.decode()
    assert set(Job.objects.filter(array=array).values_list("outcome", flat=True)) == {"cancelled"}


def test_the_form_submits_an_array(owner, pool):
    client = _web(owner)
    form = {"name": "form-sweep", "command": "echo $E31_ARRAY_INDEX", "kind": "simulation", "gpus": "1",
            "nodes": "1", "time_limit": "10m", "array": "4",
            "data-TOTAL_FORMS": "0", "data-INITIAL_FORMS": "0"}
    resp = client.post("/jobs/new/", form)
    array = JobArray.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/arrays/{array.pk}/"
    assert array.size == 4 and Job.objects.filter(array=array).count() == 4


@pytest.mark.parametrize("size", ["0", "10001"])
def test_the_form_shows_the_array_error_next_to_the_field(owner, pool, size):
    form = {"name": "x", "command": "true", "kind": "other", "gpus": "1", "nodes": "1", "time_limit": "10m",
            "array": size, "data-TOTAL_FORMS": "0", "data-INITIAL_FORMS": "0"}
    resp = _web(owner).post("/jobs/new/", form)
    assert resp.status_code == 200
    assert "from 1 to 10,000" in resp.context["form"].errors["array"][0]
    assert not Job.objects.exists()


def test_array_cancel_leaves_finished_tasks_alone(owner, pool):
    submitted = array_submit(owner=owner, document=spec(array=3))
    array_cancel(array=submitted.array)
    assert Job.objects.filter(array=submitted.array, state="released").count() == 3
    assert array_cancel(array=submitted.array).released == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_live_my_jobs_gets_the_array_as_one_row_never_a_row_per_task(owner, pool):
    """One message for the submit of 8 tasks; the tasks' own changes (6 rented) update the array row."""
    from asgiref.sync import async_to_sync
    from channels.db import database_sync_to_async

    from tests.web.test_live_consumers import communicator, content, cookie_of

    async def scenario():
        comm = communicator("/ws/jobs/", await database_sync_to_async(cookie_of)(owner))
        assert (await comm.connect())[0]
        assert content(await comm.receive_from(5)) == ""  # no jobs yet
        submitted = await database_sync_to_async(array_submit)(owner=owner, document=spec(array=8))
        seen = []
        while not await comm.receive_nothing(0.5):
            seen.append(await comm.receive_from(5))
        assert seen and all("job-row-" not in m for m in seen)
        assert any(f'id="array-row-{submitted.array.pk}"' in m and "6 rented" in m for m in seen)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_the_array_row_and_page_show_its_cost_gpu_time_and_each_task_s_index(owner, pool, frozen_clock):
    """Issue 28 item 3: cost and GPU time summed over the tasks' leases, a Task column on the page."""
    submitted = array_submit(owner=owner, document=spec(array=2))
    schedule_cycle()
    for job in Job.objects.filter(array=submitted.array).order_by("array_index"):
        Agent(job, frozen_clock).run(run_s=540)
    page = _web(owner).get(f"/arrays/{submitted.array.pk}/").content.decode()
    leases = list(Lease.objects.filter(job__array=submitted.array))
    assert len(leases) == 2
    assert f"{sum(lease.billed_seconds * lease.gpu_count for lease in leases) / 3600:.2f} GPU-h" in page
    assert f"${sum(lease.cost for lease in leases):.2f}" in page
    assert '<td class="num cell-index" data-label="Task">1</td>' in page
