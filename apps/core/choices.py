"""Job and node states, outcomes and end reasons (SPEC §3, §5), with the moves the job state machine allows.

Shared by every layer: one vocabulary for the server, its pages and its API."""
from django.db import models
from e31_protocol import NodeState as ProtocolNodeState


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RENTED = "rented", "Rented"
    RUNNING = "running", "Running"
    OUTPUT = "output", "Output"
    RELEASED = "released", "Released"


class Outcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    NODE_LOST = "node_lost", "Node lost"


class EndReason(models.TextChoices):
    """Why the run ended, as the agent (or the server, for node loss) saw it."""

    EXIT = "exit", "Command exited"
    TIME_LIMIT = "time_limit", "Time limit reached"
    CANCELLED = "cancelled", "Cancelled"
    STAGING_FAILED = "staging_failed", "Staging failed"
    START_FAILED = "start_failed", "Could not start"
    NODE_LOST = "node_lost", "Node lost"


class JobKind(models.TextChoices):
    TRAINING = "training", "Training"
    INFERENCE = "inference", "Inference"
    PROCESSING = "processing", "Processing"
    SIMULATION = "simulation", "Simulation"
    OTHER = "other", "Other"


# Holding GPUs on a node: the states with an open lease.
HOLDING = frozenset({JobState.RENTED, JobState.RUNNING, JobState.OUTPUT})
ACTIVE = frozenset({JobState.QUEUED}) | HOLDING
TERMINAL = frozenset({JobState.RELEASED})

# Every move the state machine allows. ``-> queued`` is the retry after node
# loss; ``rented -> output`` is a run that never started (staging failed,
# cancelled while staging); ``* -> released`` without output is a cancel in
# the queue or the last attempt lost with its node.
ALLOWED_MOVES: dict[str, frozenset[str]] = {
    JobState.QUEUED: frozenset({JobState.RENTED, JobState.RELEASED}),
    JobState.RENTED: frozenset({JobState.RUNNING, JobState.OUTPUT, JobState.QUEUED, JobState.RELEASED}),
    JobState.RUNNING: frozenset({JobState.OUTPUT, JobState.QUEUED, JobState.RELEASED}),
    JobState.OUTPUT: frozenset({JobState.RELEASED, JobState.QUEUED}),
    JobState.RELEASED: frozenset(),
}

# The job field each state stamps with the server's clock when entered.
STAMP_FIELD: dict[str, str] = {
    JobState.RENTED: "rented_at",
    JobState.RUNNING: "run_started_at",
    JobState.OUTPUT: "run_ended_at",
    JobState.RELEASED: "released_at",
}


# A node's state is the protocol's word (the heartbeat answer sends it): the choices are derived from
# e31_protocol.NodeState, the one definition, each labelled by its word capitalised ("Draining").
NodeState = models.TextChoices(
    "NodeState", [(state.name, (state.value, state.value.capitalize())) for state in ProtocolNodeState],
    module=__name__,
)
NodeState.__doc__ = "A node's state (SPEC §5), the server's side of :class:`e31_protocol.NodeState`, with labels."

# Every move of a node's state (SPEC §5, §6): registration brings a node up (or draining, when the
# operator asked for it), the operator drains and undrains it, the loss timeout takes it down. A
# move to the state it is in is no move (a second registration, a repeated drain).
NODE_MOVES: dict[str, frozenset[str]] = {
    NodeState.UP: frozenset({NodeState.DRAINING, NodeState.DOWN}),
    NodeState.DRAINING: frozenset({NodeState.UP, NodeState.DOWN}),
    NodeState.DOWN: frozenset({NodeState.UP, NodeState.DRAINING}),
}


class LeaseState(models.TextChoices):
    """Where a lease stands (SPEC §4); its ``end_reason`` says why the run ended."""

    OPENING = "opening", "Opening"  # GPUs held and the meter running; the agent has not taken it yet
    HELD = "held", "Held"  # the agent took the attempt (``accepted_at``)
    STOPPING = "stopping", "Stopping"  # the run ended, the meter stopped (``run_ended_at``); outputs on the way
    FENCED = "fenced", "Fenced"  # released on the meter, its GPUs held until the node confirms the stop
    CLOSED = "closed", "Closed"  # released (``released_at``): its GPUs are back in the pool


# Every move of a lease. A stop needs no accept first (the server stops a run an agent never
# took: a time limit it enforced, a lost gang partner); a release or a loss stops the meter first
# when it still runs, so ``opening``/``held`` reach ``fenced``/``closed`` through ``stopping``.
LEASE_MOVES: dict[str, frozenset[str]] = {
    LeaseState.OPENING: frozenset({LeaseState.HELD, LeaseState.STOPPING}),
    LeaseState.HELD: frozenset({LeaseState.STOPPING}),
    LeaseState.STOPPING: frozenset({LeaseState.FENCED, LeaseState.CLOSED}),
    LeaseState.FENCED: frozenset({LeaseState.CLOSED}),
    LeaseState.CLOSED: frozenset(),
}
