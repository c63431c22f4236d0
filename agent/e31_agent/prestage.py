"""Pre-staging: fetching queued jobs' inputs into the node's cache while they wait, meter off.

Every work answer carries the server's list of queued jobs planned on this
node (``prestage``, docs/agent-protocol.md). One background thread takes
them in order, pulls a job's public image (``image``: the server offers only one pulled without
a login, since a secret reaches only a node holding the attempt; :mod:`e31_agent.images`) and
fills the cache with their cacheable inputs (see
:meth:`e31_agent.staging.Stager.prefetch`), reporting progress to
``POST prestage/`` at most once a second and once at the end. A job that
drops off the list (the plan moved, it was cancelled) is abandoned at once,
unless it was assigned to this node meanwhile: then its download goes on,
and the job's own staging waits for it rather than fetching twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from e31_protocol import MESSAGE_MAX, PrestageState, payloads
from e31_protocol.redact import redact_text

from . import container, images, node_inputs
from .client import Aborted, ApiClient
from .config import Workdir
from .models import DataItem, PrestageOffer
from .node_inputs import NodeInputs
from .staging import Stager, StagingAborted, StagingError

log = logging.getLogger(__name__)

REPORT_EVERY_S = 1.0


class Prestager:
    """The node's pre-stage worker. :meth:`update` with each work answer; stops with ``stop``."""

    def __init__(self, *, client: ApiClient, workdir: Workdir, inputs: NodeInputs, stop: threading.Event,
                 runtime: str | None = None) -> None:
        self.client = client
        self.workdir = workdir
        self.inputs = inputs
        self.stop = stop
        self.runtime = runtime  # the image runtime (podman or docker), None: no image is pulled here
        self._cond = threading.Condition()
        self._wanted: dict[int, tuple[list[DataItem], str | None]] = {}
        self._assigned: set[int] = set()
        self._finished: set[int] = set()  # done or failed while wanted; not fetched again
        self.current: int | None = None  # the job being pre-staged now
        self._thread = threading.Thread(target=self._main, name="prestage", daemon=True)

    def start(self) -> Prestager:
        self._thread.start()
        return self

    def update(self, offers: list[PrestageOffer], *, assigned: list[int] = ()) -> None:
        """The server's current list (a work answer); ``assigned``: job ids assigned here just now."""
        with self._cond:
            self._wanted = {o.job_id: (o.data, o.image if self.runtime else None) for o in offers
                            if o.data or (o.image and self.runtime)}
            self._assigned.update(assigned)
            self._finished &= set(self._wanted)
            self._cond.notify_all()

    def wanted(self) -> list[int]:
        with self._cond:
            return sorted(self._wanted)

    # -- the worker ------------------------------------------------------------

    def _next(self) -> tuple[int, tuple[list[DataItem], str | None]] | None:
        with self._cond:
            while not self.stop.is_set():
                for job_id, wanted in self._wanted.items():
                    if job_id not in self._finished:
                        return job_id, wanted
                self._cond.wait(1.0)
        return None

    def _keep_going(self, job_id: int) -> bool:
        with self._cond:
            return not self.stop.is_set() and (job_id in self._wanted or job_id in self._assigned)

    def _main(self) -> None:
        while (job := self._next()) is not None:
            job_id, (items, image) = job
            self.current = job_id
            ended = True
            try:
                ended = (image is None or self._pull(job_id, image)) and self._prestage(job_id, items)
            except Aborted:
                return
            except Exception as exc:  # no traceback: its frames may quote a URL with credentials
                log.error("pre-staging job %s failed: %s", job_id, redact_text(f"{type(exc).__name__}: {exc}"))
            finally:
                self.current = None
            with self._cond:
                if ended:  # an abandoned job starts again if it is planned here again
                    self._finished.add(job_id)
                self._assigned.discard(job_id)

    def _pull(self, job_id: int, image: str) -> bool:
        """Pull the job's public image anonymously unless the store holds it and it is known public
        (:data:`e31_agent.images.PULLED`); False when the pull failed (reported: the job's own pull
        at its start would fail the same way, so its inputs are not fetched)."""
        assert self.runtime is not None

        def announce(words: str) -> None:
            log.info("%s for job %s", words, job_id)
            self._report(job_id, PrestageState.FETCHING, 0, None, message=words)

        try:
            images.pull_unless_entitled(self.runtime, image, login=None, scratch_dir=self.workdir.tmp,
                                        announce=announce)
        except images.ImagePullError as exc:
            log.warning("pre-pull for job %s failed: %s", job_id, exc)
            self._report(job_id, PrestageState.FAILED, 0, None, message=str(exc))
            return False
        return True

    def _prestage(self, job_id: int, items: list[DataItem]) -> bool:
        """Fill the cache with the job's inputs; False when it was abandoned half way."""
        if not items:
            self._report(job_id, PrestageState.DONE, 0, 0)
            return True
        last = 0.0

        def progress(done: int, total: int | None) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= REPORT_EVERY_S:
                last = now
                self._report(job_id, PrestageState.FETCHING, done, total)

        stager = Stager(
            client=self.client,
            job_dir=None,
            tmp_dir=self.workdir.tmp,
            cache=self.inputs.cache,
            file_roots=self.inputs.file_roots,
            net_policy=self.inputs.net_policy,
            extract_limits=self.inputs.extract_limits,
            should_stop=lambda: not self._keep_going(job_id),
            progress=progress,
        )
        log.info("pre-staging the inputs of job %s", job_id)
        try:
            done, total = stager.prefetch(items)
        except StagingAborted:
            log.info("pre-staging job %s stopped: no longer planned here", job_id)
            return False
        except StagingError as exc:
            message = redact_text(str(exc))  # a URL's userinfo or signature never reaches a log (issue 23)
            log.warning("pre-staging job %s failed: %s", job_id, message)
            self._report(job_id, PrestageState.FAILED, stager.done, stager.total, message=message)
            return True
        log.info("pre-staged job %s: %d bytes in the cache", job_id, done)
        self._report(job_id, PrestageState.DONE, done, total)
        return True

    def _report(self, job_id: int, state: PrestageState, done: int, total: int | None, *, message: str = "") -> None:
        item: payloads.PrestageProgress = {"job_id": job_id, "state": state, "bytes_done": done,
                                           "bytes_total": total}
        if message:
            item["message"] = message[:MESSAGE_MAX]
        try:
            self.client.prestage_report([item])
        except Aborted:
            raise
        except Exception as exc:  # progress is informative only
            log.warning("pre-stage report for job %s not sent: %s", job_id, exc)


def start_prestager(client: ApiClient, workdir: Workdir, config: Any, job_user: tuple[int, int] | None,
                    runtimes: list[str] | None = None) -> Prestager:
    """Set up the node's input cache from ``config`` (``cache_max_bytes``, ``file_roots``; the
    environment's defaults where it has none) and start the pre-stage worker, which pulls public
    images too with the node's image runtime (one of ``runtimes``: podman or docker).

    Cached files may be hard-linked into job dirs only when jobs run as another user
    (``job_user``), who cannot write them. Raises ``node_inputs.FileRootError``.
    """
    max_bytes = getattr(config, "cache_max_bytes", None)
    max_bytes = node_inputs.env_max_bytes() if max_bytes is None else max_bytes
    roots = getattr(config, "file_roots", None)
    allow = getattr(config, "allow_hosts", None)
    inputs = node_inputs.configure(
        workdir.cache,
        max_bytes=max_bytes,
        file_roots=list(roots) if roots else node_inputs.env_file_roots(),
        hardlink_ok=job_user is not None,
        allow_hosts=list(allow) if allow else node_inputs.env_allow_hosts(),
        extract_limits=getattr(config, "extract_limits", None),
        output_limits=getattr(config, "output_limits", None),
    )
    log.info("input cache %s: %d of %d bytes used; file:// allowed under %s", workdir.cache,
             inputs.cache.total_bytes, max_bytes, ", ".join(map(str, inputs.file_roots)) or "nowhere")
    return Prestager(client=client, workdir=workdir, inputs=inputs, stop=client.stop,
                     runtime=container.pull_runtime(runtimes or [])).start()
