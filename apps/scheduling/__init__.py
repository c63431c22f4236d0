"""Scheduling: the pure core (:mod:`apps.scheduling.core`), its adapter to the database
(:mod:`apps.scheduling.adapter`), the simulator, the cycle loop and tasks, and the fair-share ledger.

Sits above the pool and below metering and jobs: it reads and places jobs only through the port
of :mod:`apps.scheduling.ports`, which the jobs app registers.
"""
