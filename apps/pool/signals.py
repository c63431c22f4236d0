"""What the pool tells the layers above it (issue 13): Django signals, sent inside the sender's
transaction, so a receiver's writes commit or roll back with the pool's own.

Receivers are connected in the higher apps' ``AppConfig.ready()``: the jobs app
(:mod:`apps.jobs.receivers`) and scheduling (:mod:`apps.scheduling.receivers`).
"""
from django.dispatch import Signal

# A node, its GPUs or its state changed (registered, drained, undrained, lost): pages showing
# the pool should refresh. Keyword arguments: none.
pool_changed = Signal()

# GPUs may now take jobs they could not take before (a down node registered again, a drain was
# lifted): a scheduling cycle should run once the transaction commits. Keyword arguments: none.
capacity_added = Signal()

# A node was declared down at ``at`` (its last heartbeat, a datetime): the jobs holding GPUs on
# it must be recovered (SPEC §6). Keyword arguments: ``node`` (a :class:`~apps.pool.models.Node`),
# ``at``. Sent after the node's row is marked down and its down span recorded.
node_lost = Signal()
