"""The agent's own calls under ``/api/v1/agent/`` (docs/agent-protocol.md). Node token only.

Every call is in the OpenAPI document (``/api/schema/``, tag ``agent``, protocol version in
``info.x-e31-agent-protocol``). Refusals carry a machine-readable ``code``
(:class:`e31_protocol.ErrorCode`) beside the human ``detail``.
"""
from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponseRedirect, JsonResponse
from django.utils.http import content_disposition_header
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from e31_protocol import HAVE_MAX, LOG_CHUNK_MAX_BYTES, PROTOCOL_VERSION, WORK_WAIT_MAX_S, ErrorCode
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agent_api.api.auth import IsNode, NodeTokenAuthentication, token_from_header
from apps.agent_api.api.bounds import INT_MAX
from apps.agent_api.api.serializers import (
    BatchReportSerializer,
    BundleChunkAnswerSerializer,
    BundleCompleteAnswerSerializer,
    BundleCompleteSerializer,
    BundleDirectAnswerSerializer,
    BundleDirectSerializer,
    BundleErrorAnswerSerializer,
    BundleStatusAnswerSerializer,
    ErrorAnswerSerializer,
    HeartbeatAnswerSerializer,
    HeartbeatSerializer,
    LogAnswerSerializer,
    RegisterAnswerSerializer,
    RegisterSerializer,
    ReportAnswerSerializer,
    ReportBatchAnswerSerializer,
    ReportBatchRequestSerializer,
    ReportBatchSerializer,
    ReportSerializer,
    SamplesAnswerSerializer,
    SamplesSerializer,
    WorkAnswerSerializer,
)
from apps.agent_api.reports import StaleAttempt, agent_log_append, agent_report, agent_reports_apply
from apps.agent_api.samples import agent_samples_store
from apps.agent_api.selectors import ended_attempts, node_may_fetch_upload, running_on, work_with_gang_stops
from apps.artifacts.direct import bundle_direct_complete, bundle_direct_start
from apps.artifacts.files import NotAddressable, bundle_file
from apps.artifacts.http import output_file_response, serve_file
from apps.artifacts.models import Bundle, Upload
from apps.artifacts.services import ChunkError, bundle_complete, bundle_put_chunk
from apps.artifacts.storage import is_direct, object_store
from apps.core import clock
from apps.jobs.checkpoints import checkpoint_file
from apps.jobs.models import Job
from apps.jobs.prestage import prestage_mark_offered
from apps.jobs.services.attempts import attempts_heartbeat
from apps.jobs.services.outputs import outputs_unmatched_record
from apps.metering.selectors import Lease, lease_of_attempt  # Lease: the row's type, for hints
from apps.pool.models import Node
from apps.pool.notify import node_group
from apps.pool.services import node_for_token, node_heartbeat, node_register

AGENT_TAG = "agent"
STALE = {"detail": "stale attempt", "code": ErrorCode.STALE_ATTEMPT.value}  # 409: match the code, not the words
ATTEMPT = OpenApiParameter("attempt", int, required=True, description="The attempt the call is about.")
FIELD_ERRORS = OpenApiResponse(OpenApiTypes.OBJECT, description="Field errors: {field: [messages]}.")
_ERRORS = {404: ErrorAnswerSerializer,
           409: OpenApiResponse(ErrorAnswerSerializer, description="code stale_attempt: the attempt is over here")}


def agent_schema(summary: str, **kwargs: Any) -> Any:
    """``extend_schema`` for an agent call: tag ``agent``, node token, the protocol version."""
    return extend_schema(tags=[AGENT_TAG], summary=summary,
                         description=f"Agent protocol v{PROTOCOL_VERSION} (docs/agent-protocol.md). "
                                     + kwargs.pop("description", ""), **kwargs)


class AgentView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]

    @property
    def node(self) -> Node:
        return self.request.auth

    def attempt_lease(self, job_id: int) -> Lease:
        """This node's lease of the job and attempt named by the URL and ``?attempt=``."""
        try:
            attempt = int(self.request.query_params.get("attempt", ""))
        except ValueError:
            raise Http404 from None
        lease = lease_of_attempt(node=self.node, job_id=job_id, attempt=attempt)
        if lease is None:
            raise Http404
        return lease


class RegisterView(AgentView):
    @agent_schema("Register the node and its hardware", request=RegisterSerializer,
                  responses={200: RegisterAnswerSerializer, 400: FIELD_ERRORS})
    def post(self, request):
        ser = RegisterSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        node = node_register(node=self.node, inventory=ser.validated_data)
        return Response({"node": node.name, "heartbeat_interval_s": settings.E31_HEARTBEAT_S,
                         "poll_wait_s": settings.E31_AGENT_POLL_WAIT_S,
                         "node_loss_timeout_s": settings.E31_NODE_LOSS_TIMEOUT_S, "running": running_on(node),
                         "protocol_version": PROTOCOL_VERSION})


class HeartbeatView(AgentView):
    @agent_schema("Heartbeat: the attempts running here, GPU health; answered with cancels",
                  request=HeartbeatSerializer, responses={200: HeartbeatAnswerSerializer, 400: FIELD_ERRORS})
    def post(self, request):
        ser = HeartbeatSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        running = data["running"] if "running" in request.data else None
        node = attempts_heartbeat(node=self.node, health=data.get("health"), cached_inputs=data.get("cached_inputs"),
                                  running=running, now=clock.now())
        # fencing: attempts the server ended are stopped (read after the beat's reconciliation)
        stops = ended_attempts(node, {(r["job_id"], r["attempt"]) for r in running}) if running is not None else []
        cancel = work_with_gang_stops(node)["cancel"]
        return Response({"cancel": cancel + [s for s in stops if s not in cancel], "state": node.state})


class ReportView(AgentView):
    @agent_schema("One job report (accepted, staging, running, exited, finished)", request=ReportSerializer,
                  responses={200: ReportAnswerSerializer, 400: FIELD_ERRORS, **_ERRORS})
    def post(self, request, job_id: int):
        ser = ReportSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            applied = agent_report(node=self.node, job_id=job_id, report=ser.validated_data)
        except Job.DoesNotExist:
            raise Http404 from None
        except StaleAttempt:
            return Response(STALE, status=status.HTTP_409_CONFLICT)
        return Response({"duplicate": not applied})


class ReportBatchView(AgentView):
    """Several reports, of several jobs, in one call (protocol v2); one answer per report."""

    @agent_schema("Several job reports in one call; one result per report", request=ReportBatchRequestSerializer,
                  responses={200: ReportBatchAnswerSerializer, 400: FIELD_ERRORS})
    def post(self, request):
        envelope = ReportBatchSerializer(data=request.data)
        envelope.is_valid(raise_exception=True)
        items = envelope.validated_data["reports"]
        answers: list[dict | None] = [None] * len(items)
        valid: list[tuple[int, int, dict]] = []
        for i, item in enumerate(items):
            ser = BatchReportSerializer(data=item)
            if ser.is_valid():
                report = dict(ser.validated_data)
                valid.append((i, report.pop("job_id"), report))
            else:
                answers[i] = {"job_id": item.get("job_id"), "seq": item.get("seq"), "status": 400,
                              "errors": ser.errors}
        applied = agent_reports_apply(node=self.node, reports=[(job_id, report) for _, job_id, report in valid])
        for (i, _, _), answer in zip(valid, applied, strict=True):
            answers[i] = answer
        return Response({"results": answers})


class LogView(AgentView):
    @agent_schema("A chunk of the job's log (raw bytes, at most 1 MiB) at a byte offset",
                  request={"application/octet-stream": OpenApiTypes.BINARY},
                  parameters=[ATTEMPT, OpenApiParameter("offset", int, required=True,
                                                        description="Byte offset of the chunk in the log."),
                              OpenApiParameter("stream", str, enum=["stdout", "stderr", "combined"],
                                               description="The stream all the chunk's bytes came from "
                                                           "(default combined: an agent that does not say)."),
                              OpenApiParameter("at", float, description="When the agent read the chunk's "
                                                                        "first bytes, epoch seconds (agent clock).")],
                  responses={200: LogAnswerSerializer, 400: ErrorAnswerSerializer, **_ERRORS})
    def post(self, request, job_id: int):
        try:
            attempt = int(request.query_params["attempt"])
            offset = int(request.query_params["offset"])
        except (KeyError, ValueError):
            return Response({"detail": "attempt and offset must be integers"}, status=400)
        stream = request.query_params.get("stream", "combined")
        if stream not in ("stdout", "stderr", "combined"):
            return Response({"detail": "stream must be stdout, stderr or combined"}, status=400)
        at = None
        if request.query_params.get("at"):
            try:
                at = datetime.fromtimestamp(float(request.query_params["at"]), tz=UTC)
            except (ValueError, OverflowError, OSError):
                return Response({"detail": "at must be epoch seconds"}, status=400)
        data = request.body
        if len(data) > LOG_CHUNK_MAX_BYTES or offset < 0:
            return Response({"detail": "a chunk is at most 1 MiB, at an offset >= 0"}, status=400)
        try:
            size = agent_log_append(node=self.node, job_id=job_id, attempt=attempt, offset=offset, data=data,
                                    stream=stream, at=at)
        except Job.DoesNotExist:
            raise Http404 from None
        except StaleAttempt:
            return Response(STALE, status=409)
        except ValueError as exc:
            return Response({"detail": str(exc), "code": ErrorCode.LOG_REFUSED.value}, status=409)
        return Response({"size": size})


class SamplesView(AgentView):
    @agent_schema("Usage samples of the job's run (CPU, memory, GPU) for its charts",
                  description="Optional: an agent that sends none loses only the charts.",
                  request=SamplesSerializer, parameters=[ATTEMPT],
                  responses={200: SamplesAnswerSerializer, 400: FIELD_ERRORS, **_ERRORS})
    def post(self, request, job_id: int):
        try:
            attempt = int(request.query_params["attempt"])
        except (KeyError, ValueError):
            attempt = 0
        if not 1 <= attempt <= INT_MAX:
            return Response({"attempt": ["Must be a whole number from 1."]}, status=400)
        ser = SamplesSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            stored = agent_samples_store(node=self.node, job_id=job_id, attempt=attempt,
                                         gpu_source=ser.validated_data["gpu_source"],
                                         samples=ser.validated_data["samples"])
        except Job.DoesNotExist:
            raise Http404 from None
        except StaleAttempt:
            return Response(STALE, status=409)
        return Response({"stored": stored})


def _chunk_refused(exc: ChunkError) -> Response:
    """A refused bundle chunk or ``complete``: 409 with ``code: offset_mismatch`` when the server
    holds another offset, else 400; both say ``received_bytes``."""
    body = {"detail": str(exc), "received_bytes": exc.received_bytes}
    if exc.conflict:
        body["code"] = ErrorCode.OFFSET_MISMATCH.value
    return Response(body, status=409 if exc.conflict else 400)


_BUNDLE_ERRORS = {400: BundleErrorAnswerSerializer, 404: ErrorAnswerSerializer,
                  409: OpenApiResponse(BundleErrorAnswerSerializer, description="code offset_mismatch")}


class BundleView(AgentView):
    @agent_schema("How many bytes of the attempt's bundle the server holds", parameters=[ATTEMPT],
                  responses={200: BundleStatusAnswerSerializer, 404: ErrorAnswerSerializer})
    def get(self, request, job_id: int):
        lease = self.attempt_lease(job_id)
        bundle = Bundle.objects.filter(job=lease.job, attempt=lease.attempt, rank=lease.node_rank).first()
        answer = {"received_bytes": bundle.received_bytes if bundle else 0,
                  "complete": bool(bundle and bundle.completed_at)}
        if is_direct():
            answer.update(direct=True, verifying=bool(bundle and bundle.verifying_since),
                          refused=bundle.refused if bundle else "")
        return Response(answer)

    @agent_schema("One chunk of the bundle at a byte offset (header X-Content-Sha256: the chunk's sha256)",
                  request={"application/octet-stream": OpenApiTypes.BINARY},
                  parameters=[ATTEMPT, OpenApiParameter("offset", int, required=True),
                              OpenApiParameter("X-Content-Sha256", str, OpenApiParameter.HEADER, required=True)],
                  responses={200: BundleChunkAnswerSerializer, **_BUNDLE_ERRORS})
    def put(self, request, job_id: int):
        lease = self.attempt_lease(job_id)
        try:
            offset = int(request.query_params.get("offset", ""))
        except ValueError:
            return Response({"detail": "offset must be an integer"}, status=400)
        if is_direct():
            return Response({"detail": "this server keeps bundles in an object store: upload straight to it "
                                       "(POST bundle/direct/; agents from issue 15 on)", "received_bytes": 0},
                            status=400)
        try:
            received = bundle_put_chunk(job=lease.job, attempt=lease.attempt, rank=lease.node_rank,
                                        offset=offset, data=request.body,
                                        sha256=request.headers.get("X-Content-Sha256", ""))
        except ChunkError as exc:
            return _chunk_refused(exc)
        return Response({"received_bytes": received})


class BundleCompleteView(AgentView):
    @agent_schema("The bundle is whole: the server checks size, sha256 and manifest", parameters=[ATTEMPT],
                  request=BundleCompleteSerializer, responses={200: BundleCompleteAnswerSerializer, **_BUNDLE_ERRORS})
    def post(self, request, job_id: int):
        lease = self.attempt_lease(job_id)
        job = lease.job
        ser = BundleCompleteSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        complete = bundle_direct_complete if is_direct() else bundle_complete
        try:
            bundle = complete(job=job, attempt=lease.attempt, rank=lease.node_rank,
                              size_bytes=data["size_bytes"], sha256=data["sha256"],
                              files=[dict(f) for f in data["files"]],
                              retention_days=job.spec["output"].get("retention_days")
                              or settings.E31_RETENTION_DAYS_DEFAULT)
        except ChunkError as exc:
            return _chunk_refused(exc)
        if "unmatched" in data:
            outputs_unmatched_record(job_id=job.pk, attempt=lease.attempt, rank=lease.node_rank,
                                     patterns=list(data["unmatched"]))
        if not bundle.completed_at:  # joined in the object store; verified by the side worker
            return Response({"size_bytes": bundle.size_bytes, "sha256": bundle.sha256, "verifying": True},
                            status=202)
        return Response({"size_bytes": bundle.size_bytes, "sha256": bundle.sha256})


class BundleDirectView(AgentView):
    @agent_schema("Start or resume the bundle's upload straight to the object store: signed part URLs",
                  description="Only when GET bundle/ says `direct` (the site keeps files in an S3-compatible "
                              "store). PUT each part to its URL, then POST bundle/complete/; resumable: the "
                              "answer lists the parts the store holds.",
                  parameters=[ATTEMPT], request=BundleDirectSerializer,
                  responses={200: BundleDirectAnswerSerializer, **_BUNDLE_ERRORS})
    def post(self, request, job_id: int):
        lease = self.attempt_lease(job_id)
        if not is_direct():
            return Response({"detail": "this server takes bundles in chunks (PUT bundle/)", "received_bytes": 0},
                            status=400)
        ser = BundleDirectSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            offer = bundle_direct_start(job=lease.job, attempt=lease.attempt, rank=lease.node_rank,
                                        size_bytes=ser.validated_data["size_bytes"])
        except ChunkError as exc:
            return _chunk_refused(exc)
        return Response(offer)


class CheckpointFileView(AgentView):
    @agent_schema("One file of the checkpoint the attempt starts with on this node's rank, streamed",
                  parameters=[ATTEMPT, OpenApiParameter("path", str, required=True)],
                  responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 404: ErrorAnswerSerializer})
    def get(self, request, job_id: int):
        """A file the assignment's ``checkpoint.files`` lists, only to the node holding the attempt
        (issue 24 item 5); anything else answers 404."""
        lease = self.attempt_lease(job_id)
        found = checkpoint_file(lease.job, attempt=lease.attempt, rank=lease.node_rank,
                                path=request.query_params.get("path", ""))
        entry = bundle_file(found[0], found[1]) if found else None
        if entry is None:
            raise Http404
        try:
            return output_file_response(request, entry)
        except NotAddressable:  # an older agent's bundle.tar.gz: no offsets to read a file at
            raise Http404 from None


class UploadDownloadView(AgentView):
    @agent_schema("An input file (upload:<id>) of a job held or pre-staged here, streamed",
                  responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 404: ErrorAnswerSerializer})
    def get(self, request, upload_id):
        """An input file, only to a node holding a job of the upload's owner that names it."""
        upload = Upload.objects.filter(pk=upload_id).first()
        if upload is None or not node_may_fetch_upload(self.node, upload):
            raise Http404
        if is_direct():  # straight from the object store, with a URL signed for this request (Range works)
            return HttpResponseRedirect(object_store().get_url(upload.file.name, filename=upload.name,
                                                               content_type="application/octet-stream"))
        # serve_file streams 4 MiB blocks under ASGI (a FileResponse there was read whole into memory)
        resp = serve_file(request, upload.file, filename="", size=upload.size_bytes, etag=upload.sha256,
                          content_type="application/octet-stream")
        resp["Content-Disposition"] = content_disposition_header(True, upload.name)
        return resp


def _held_refs(raw: str) -> set[tuple[int, int]]:
    """``?have=12.1,13.2``: the attempts the agent already holds (protocol v2). Their assignments
    are still listed in the answer but do not make the long poll answer at once.

    Raises:
        ValueError: not a comma-separated list of ``job.attempt`` (at most ``HAVE_MAX``).
    """
    refs = set()
    parts = [p for p in raw.split(",") if p]
    if len(parts) > HAVE_MAX:
        raise ValueError(f"at most {HAVE_MAX} attempts")
    for part in parts:
        job, sep, attempt = part.partition(".")
        if not sep or not job.isdigit() or not attempt.isdigit():
            raise ValueError(f"{part[:40]!r} is not job_id.attempt")
        refs.add((int(job), int(attempt)))
    return refs


@csrf_exempt
async def work_view(request: HttpRequest) -> JsonResponse:
    """Long poll: answer at once if there is work for this node, else wait up to ``?wait=`` s.

    Assignments of the attempts listed in ``?have=`` (the agent holds them already) are listed
    but do not count as new work.

    The poll joins the node's channel-layer group *before* it reads the
    database, so a wake sent between the read and the wait is not lost.
    """
    if request.method != "GET":
        return JsonResponse({"detail": "method not allowed"}, status=405)
    node = await sync_to_async(node_for_token)(token_from_header(request.headers.get("Authorization", "")))
    if node is None:
        return JsonResponse({"detail": "unknown node token"}, status=401)
    try:
        wait = min(30.0, max(0.0, float(request.GET.get("wait", "0"))))
    except ValueError:
        return JsonResponse({"detail": "wait must be a number of seconds"}, status=400)
    try:
        have = _held_refs(request.GET.get("have", ""))
    except ValueError as exc:
        return JsonResponse({"detail": f"have: {exc}"}, status=400)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = node_group(node.pk)
    await layer.group_add(group, channel)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            await sync_to_async(node_heartbeat)(node=node)
            work = await sync_to_async(work_with_gang_stops)(node)
            left = deadline - loop.time()
            new_prestage = [p["job_id"] for p in work["prestage"] if p["new"]]
            new_assignments = [a for a in work["assignments"] if (a["job_id"], a["attempt"]) not in have]
            if new_assignments or work["cancel"] or new_prestage or left <= 0:
                await sync_to_async(prestage_mark_offered)(node, new_prestage)
                # fencing: held attempts the server ended are stopped too (they do not make the poll
                # answer early: the heartbeat carries them as well)
                stops = await sync_to_async(ended_attempts)(node, have)
                work["cancel"] += [s for s in stops if s not in work["cancel"]]
                return JsonResponse(work)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(layer.receive(channel), timeout=left)
    finally:
        await layer.group_discard(group, channel)


class WorkSchemaView(AgentView):
    """The OpenAPI description of :func:`work_view`, an async Django view (the long poll), which
    drf-spectacular cannot see by itself; never routed (see :data:`work_view`'s ``cls``)."""

    @agent_schema(
        "Long poll for work: assignments, cancels, pre-stage offers",
        parameters=[
            OpenApiParameter("wait", float, description=f"Seconds to wait for work, 0..{WORK_WAIT_MAX_S}."),
            OpenApiParameter("have", str, description=f"Attempts held already, job_id.attempt comma list "
                                                      f"(at most {HAVE_MAX}); protocol v2."),
        ],
        responses={200: WorkAnswerSerializer, 400: ErrorAnswerSerializer, 401: ErrorAnswerSerializer},
    )
    def get(self, request):  # pragma: no cover - schema only
        raise Http404


# drf-spectacular lists DRF views only: it reads ``callback.cls`` (and ``initkwargs``) of each URL's
# view, as DRF's ``as_view()`` sets them; Django routes by the function alone.
work_view.cls = WorkSchemaView  # type: ignore[attr-defined]
work_view.initkwargs = {}  # type: ignore[attr-defined]
