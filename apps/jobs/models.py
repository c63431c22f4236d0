"""Jobs, their timeline events and logs (the agent reports applied: :mod:`apps.agent_api.models`)."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from apps.core.choices import HOLDING, EndReason, JobKind, JobState, Outcome


class JobArray(models.Model):
    """N tasks submitted together from one spec with ``array: N`` (SPEC §2, "Job arrays").

    Each task is a :class:`Job` of its own (``Job.array``, ``Job.array_index`` 0..N-1) that
    queues, runs, bills and ends like any job; the array only groups them for the owner
    (one row in "My jobs", cancel all). ``spec`` is the validated spec as submitted,
    ``array`` included; the tasks' specs leave it out.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays")
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, null=True, blank=True,
                                related_name="job_arrays", help_text="The project it belongs to; empty: the owner's.")
    name = models.CharField(max_length=100)
    size = models.PositiveIntegerField(help_text="Number of tasks, N (1..10,000).")
    spec = models.JSONField(help_text="The validated spec, with its array field.")
    submitted_at = models.DateTimeField()
    cancel_requested_at = models.DateTimeField(null=True, blank=True,
                                               help_text="When the owner cancelled the whole array.")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["owner", "-submitted_at"])]

    def __str__(self) -> str:
        return f"array {self.pk} {self.name} ({self.size} tasks)"

    def get_absolute_url(self) -> str:
        return reverse("jobs:array", args=[self.pk])


class Job(models.Model):
    """One submitted request to rent GPUs for a command (SPEC §1-§3).

    ``state`` changes only through :func:`apps.jobs.state.transition`.
    Scheduling columns (``gpus_per_node``, ``nodes``, ``time_limit_s``...)
    are copied out of the validated ``spec`` at submit so the scheduler
    never parses JSON.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, null=True, blank=True,
                                related_name="jobs", help_text=(
                                    "The project it belongs to (SPEC §9); empty: the owner's personal one."))
    name = models.CharField(max_length=100)
    spec = models.JSONField(help_text="The validated, normalised spec (SPEC §2).")
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.OTHER)

    gpus_per_node = models.PositiveIntegerField()
    nodes = models.PositiveIntegerField(default=1)
    time_limit_s = models.PositiveIntegerField(help_text="Seconds; bounds the hold from rented_at.")
    priority_boost = models.IntegerField(default=0, help_text="Operator boost; higher goes first.")
    # The compute requirements, typed (apps.jobs.spec.requirement_columns): memory in MiB.
    gpu_models = models.JSONField(default=list, blank=True, help_text="GPU models accepted; empty: any.")
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="MiB per GPU at least; 0: any.")
    cpus = models.PositiveIntegerField(default=0, help_text="CPUs per node; 0: not asked.")
    memory_mib = models.PositiveBigIntegerField(default=0, help_text="Memory per node, MiB; 0: not asked.")
    needs_runtime = models.BooleanField(default=False, help_text="Names a container image.")
    mixed_models = models.BooleanField(default=False, help_text=(
        "A gang without gpu_models may mix GPU models (compute.mixed_models); else one model."))

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, null=True, blank=True)
    end_reason = models.CharField(max_length=16, choices=EndReason.choices, blank=True, default="")
    status_message = models.CharField(max_length=500, blank=True, default="")
    exit_code = models.IntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    max_attempts = models.PositiveIntegerField(default=2)

    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start_at = models.DateTimeField(null=True, blank=True, help_text="Likely start, from predictions.")
    latest_start_at = models.DateTimeField(null=True, blank=True, help_text=(
        "No later than: the start in the plan by time limits (squeue --start); holds while no job is put "
        "ahead of this one and the plan's reservations hold."))
    pending_reason = models.CharField(max_length=300, blank=True, default="")

    submitted_at = models.DateTimeField()
    rented_at = models.DateTimeField(null=True, blank=True)
    run_started_at = models.DateTimeField(null=True, blank=True)
    run_ended_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    staging_bytes_done = models.BigIntegerField(default=0)
    staging_bytes_total = models.BigIntegerField(null=True, blank=True)
    staging_rate_bps = models.FloatField(null=True, blank=True,
                                         help_text="Bytes per second between the last two staging reports.")
    staging_updated_at = models.DateTimeField(null=True, blank=True, help_text="Last staging report (server clock).")
    log_size = models.BigIntegerField(default=0, help_text="Bytes of log kept for this attempt.")
    log_truncated = models.BooleanField(default=False)
    log_objects = models.JSONField(
        default=dict, blank=True,
        help_text="Logs compacted at release into one storage object per attempt: "
                  "{attempt: {\"name\": \"logs/<job_id>/attempt-<n>.jsonl.gz\", \"sizes\": {rank: bytes}}} "
                  "(apps.jobs.services.logs.log_compact).")
    outputs_unmatched = models.JSONField(
        null=True, blank=True,
        help_text="Declared outputs that matched no file, as the agents said when packing: "
                  "{\"attempt\": n, \"ranks\": {rank: [path or glob, ...]}}; null: not said (an older "
                  "agent, or not packed yet) (apps.jobs.services.outputs).")
    event_seq = models.PositiveIntegerField(default=0, help_text="Seq of the last event (a version).")

    array = models.ForeignKey(JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="jobs",
                              help_text="The array this job is a task of, if any.")
    array_index = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="This task's index in its array, 0..size-1 "
                                                        "(E31_ARRAY_INDEX).")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-submitted_at"]),
            models.Index(fields=["state", "submitted_at", "id"]),
        ]
        constraints = [
            models.UniqueConstraint(fields=["array", "array_index"], name="job_array_index_unique"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:detail", args=[self.pk])

    @property
    def gpus_total(self) -> int:
        """GPUs held when the job runs: per node times nodes."""
        return self.gpus_per_node * self.nodes

    @property
    def is_holding(self) -> bool:
        """True while the job holds GPUs (rented, running, output)."""
        return self.state in HOLDING

    @property
    def status_note(self) -> str:
        """The last status words worth showing beside the state: empty when they only repeat
        the state's own word ("Running — running")."""
        note = self.status_message.strip()
        return "" if note.lower() == self.get_state_display().lower() else note

    @property
    def is_cancellable(self) -> bool:
        return self.state != JobState.RELEASED and self.cancel_requested_at is None


class JobDependency(models.Model):
    """One entry ``index`` of a job's ``after`` (SPEC §2, issue 25 item 7): ``job`` waits in the queue
    for job ``on_job``, or for every task of array ``on_array`` (exactly one is set), to have
    succeeded (``when="succeeded"``) or to have been released at all (``when="ended"``).

    Written at submit (:func:`apps.jobs.dependencies.dependencies_store`) and read by the scheduling
    cycle (:func:`apps.jobs.dependencies.dependencies_settle`); the spec keeps the words as submitted.
    """

    class When(models.TextChoices):
        SUCCEEDED = "succeeded", "succeeded"
        ENDED = "ended", "ended"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    index = models.PositiveIntegerField(help_text="The entry's place in the spec's after list, from 0.")
    on_job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="dependents")
    on_array = models.ForeignKey(JobArray, on_delete=models.CASCADE, null=True, blank=True,
                                 related_name="dependents")
    when = models.CharField(max_length=16, choices=When.choices, default=When.SUCCEEDED)

    class Meta:
        ordering = ["job", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "index"], name="job_dependency_index_unique"),
            models.CheckConstraint(condition=models.Q(on_job__isnull=False, on_array__isnull=True)
                                   | models.Q(on_job__isnull=True, on_array__isnull=False),
                                   name="job_dependency_one_target"),
        ]

    def __str__(self) -> str:
        target = f"job {self.on_job_id}" if self.on_job_id else f"array {self.on_array_id}"
        return f"job {self.job_id} after {target} ({self.when})"


class JobPrestage(models.Model):
    """A queued job's inputs fetched ahead into the cache of the node its reservation plans
    for it, with the meter off (issue 4, item 7). One row per planned node (rank order).

    The scheduling cycle keeps the rows equal to its reservations (:func:`apps.jobs.prestage.prestage_plan`);
    the node's agent gets them in its work answer and reports progress in bytes.
    """

    class State(models.TextChoices):
        PLANNED = "planned", "planned"
        FETCHING = "fetching", "fetching"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="prestages")
    node = models.ForeignKey("pool.Node", on_delete=models.CASCADE, related_name="prestages")
    node_rank = models.PositiveIntegerField(default=0)
    planned_at = models.DateTimeField()
    offered_at = models.DateTimeField(null=True, blank=True, help_text="First handed to the agent in a work answer.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PLANNED)
    bytes_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(null=True, blank=True)
    message = models.CharField(max_length=300, blank=True, default="")
    updated_at = models.DateTimeField(null=True, blank=True, help_text="Last progress report (server clock).")

    class Meta:
        ordering = ["job", "node_rank"]
        constraints = [models.UniqueConstraint(fields=["job", "node"], name="job_prestage_job_node_unique")]

    def __str__(self) -> str:
        return f"pre-stage of job {self.job_id} on node {self.node_id}: {self.state}"


class JobEvent(models.Model):
    """One entry of a job's timeline: a state change or a notable step.

    ``seq`` counts from 1 per job and doubles as the job's version.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    at = models.DateTimeField()
    from_state = models.CharField(max_length=16, blank=True, default="")
    to_state = models.CharField(max_length=16, blank=True, default="")
    detail = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["job", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="job_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.seq} {self.from_state}->{self.to_state}"


class LogStream(models.TextChoices):
    """Which output stream of the command a log chunk came from."""

    STDOUT = "stdout", "stdout"
    STDERR = "stderr", "stderr"
    COMBINED = "combined", "stdout and stderr"


class LogChunk(models.Model):
    """Bytes ``[offset, offset + len(data))`` of one attempt's combined log on node rank ``node_rank``.

    Each rank of a multi-node job has a log of its own (own offsets); ``Job.log_size`` and
    ``Job.log_truncated`` are rank 0's.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.PositiveIntegerField()
    node_rank = models.PositiveIntegerField(default=0)
    offset = models.BigIntegerField()
    data = models.BinaryField()
    stream = models.CharField(max_length=8, choices=LogStream.choices, default=LogStream.COMBINED,
                              help_text="The stream the bytes came from; an agent that does not say "
                                        "sends 'combined' (stdout and stderr together).")
    at = models.DateTimeField(null=True, blank=True,
                              help_text="When the agent read the chunk's first bytes (agent clock); "
                                        "null from an agent that does not say.")

    class Meta:
        ordering = ["job", "attempt", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node_rank", "offset"], name="log_chunk_offset_unique")
        ]

    def __str__(self) -> str:
        return f"log of job {self.job_id}.{self.attempt} at {self.offset}"


class JobSample(models.Model):
    """One usage sample of a running attempt on node rank ``node_rank``, as its agent measured it
    (docs/agent-protocol.md, "samples"): for the job's usage charts, never for billing.

    ``cpu_percent`` is percent of one CPU (top's way: 250 = 2.5 CPUs busy), ``rss_bytes`` the
    resident memory of the job's process tree, ``gpus`` ``[{"index", "gpu_util_percent",
    "gpu_memory_bytes"}]`` from NVML (empty unless ``gpu_source`` is ``nvml``: a simulated node
    sends no GPU figures). ``at`` is on the server's clock (arrival minus the sample's age).
    ``seq`` is the agent's number for it (increasing; a resent sample is skipped). At most
    ``E31_JOB_SAMPLES_MAX`` are kept per attempt and rank (older ones thinned:
    :func:`apps.jobs.services.samples.samples_store`).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="samples")
    attempt = models.PositiveIntegerField()
    node_rank = models.PositiveIntegerField(default=0)
    seq = models.BigIntegerField()
    at = models.DateTimeField()
    cpu_percent = models.FloatField()
    rss_bytes = models.BigIntegerField()
    gpu_source = models.CharField(max_length=16, default="none")
    gpus = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["job", "attempt", "node_rank", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node_rank", "seq"], name="job_sample_seq_unique")
        ]

    def __str__(self) -> str:
        return f"sample {self.seq} of job {self.job_id}.{self.attempt} rank {self.node_rank}"
