"""Per-group message numbers for live pages (issue 12 item 7; docs/live.md, "Converging").

Every message sent to a live group gets the next number of that group, shared by every
process that sends (a Redis counter, ``INCR``; the in-memory layer of ``make run``: a
counter in this process, the only one that sends). A socket's consumer reads the
groups' current numbers before each snapshot and in each heartbeat, and forwards every
message's number to the page, so the page can tell when one never arrived (a channel at
capacity drops messages silently) and ask for a snapshot.

A counter key lives :data:`KEY_TTL_S` after its last message; a page that sees a number
lower than the one it holds (the key expired, Redis was flushed) asks for a snapshot too.
"""
from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

import redis.asyncio as aioredis
from django.conf import settings

KEY_PREFIX = "e31:live:seq:"
KEY_TTL_S = 7 * 24 * 3600


class LocalCounter:
    """One process's counters (the in-memory channel layer: one process sends and serves)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = defaultdict(int)

    async def incr(self, group: str) -> int:
        self.values[group] += 1
        return self.values[group]

    async def current(self, groups: Iterable[str]) -> dict[str, int]:
        return {g: self.values.get(g, 0) for g in groups}


class RedisCounter:
    """Counters in Redis, shared by every process; one client per event loop."""

    def __init__(self, url: str) -> None:
        self.client = aioredis.Redis.from_url(url, socket_timeout=5)

    async def incr(self, group: str) -> int:
        key = KEY_PREFIX + group
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, KEY_TTL_S)
            value, _ = await pipe.execute()
        return int(value)

    async def current(self, groups: Iterable[str]) -> dict[str, int]:
        names = list(groups)
        if not names:
            return {}
        values = await self.client.mget([KEY_PREFIX + g for g in names])
        return {g: int(v or 0) for g, v in zip(names, values, strict=True)}


_local = LocalCounter()
_redis: dict[int, tuple[asyncio.AbstractEventLoop, RedisCounter]] = {}


def counter(layer) -> LocalCounter | RedisCounter:
    """The counter that goes with ``layer``: Redis beside channels-redis, else this process's."""
    if layer is None or not type(layer).__module__.startswith("channels_redis") or not settings.REDIS_URL:
        return _local
    loop = asyncio.get_running_loop()
    found = _redis.get(id(loop))
    if found is None or found[0] is not loop:
        if len(_redis) > 64:  # loops of finished async_to_sync calls (tests, scripts)
            for key in [k for k, (lp, _) in _redis.items() if lp.is_closed()]:
                del _redis[key]
        found = _redis[id(loop)] = (loop, RedisCounter(settings.REDIS_URL))
    return found[1]


def seqs_attr(seqs: dict[str, int]) -> str:
    """``{"user-5": 17, "job-9": 3}`` as the attribute text ``user-5:17 job-9:3``."""
    return " ".join(f"{g}:{n}" for g, n in sorted(seqs.items()))
