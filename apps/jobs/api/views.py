"""The jobs API (SPEC §7). Views only parse, call services or selectors, and render."""
from __future__ import annotations

from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.artifacts.files import NotAddressable, addressable, bundle_file, bundle_files
from apps.artifacts.http import bundle_response, output_file_response
from apps.artifacts.retention import OutputsExpired, bundle_check_kept
from apps.artifacts.services import bundle_latest, bundles_for_lists, uploads_from_files
from apps.core.choices import JobState
from apps.jobs.quotes import job_quote

from ..arrays import (
    ArrayCounts,
    ArraySubmitted,
    array_cancel,
    array_counts,
    array_own_or_404,
    arrays_of,
    spec_submit,
)
from ..logquery import LogQueryError, log_query_parse
from ..rerun import job_rerun
from ..selectors import job_own_or_404, jobs_in_project, jobs_of
from ..services.cancel import BulkCancelError, CancelEffect, bulk_ids_parse, job_cancel_effect, jobs_cancel_bulk
from ..services.logs import log_bytes, log_lines, log_page_json
from ..spec import SpecError, load_yaml
from .parsers import SafeJSONParser, TextYAMLParser, XYAMLParser, YAMLParser
from .serializers import ArraySerializer, JobEventSerializer, JobSerializer, RerunSerializer


def _int_param(request, name: str, default: int) -> int:
    """An integer query parameter; a 400 naming it when it is not one."""
    try:
        return int(request.query_params.get(name, default))
    except ValueError:
        raise ValidationError({name: ["Must be an integer."]}) from None


ID_MAX = 2**63 - 1  # the largest primary key PostgreSQL and SQLite hold
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes"), ("", "0", "false", "no")


def _id_param(request, name: str) -> int:
    """A query parameter naming a row by id: 400 naming it when it is not an integer; an id no
    row can have (below 1 or past 64 bits) is 404, as for any id that names nothing."""
    value = _int_param(request, name, 0)
    if not 1 <= value <= ID_MAX:
        raise Http404
    return value


def _flag_param(request, name: str) -> bool:
    """A yes/no query parameter (``1``/``true``/``yes`` or ``0``/``false``/``no``; absent: no);
    a 400 naming it for any other word, so a typo never does the opposite of what was meant."""
    word = request.query_params.get(name, "").strip().lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise ValidationError({name: [f"Must be one of {', '.join(w for w in TRUE_WORDS + FALSE_WORDS if w)}."]})
    return word in TRUE_WORDS


class JobListCreateView(generics.ListAPIView):
    """``GET``: my jobs, newest first (``?state=``). ``POST``: submit a spec."""

    serializer_class = JobSerializer
    parser_classes = [SafeJSONParser, YAMLParser, TextYAMLParser, XYAMLParser, MultiPartParser, FormParser]

    def get_serializer_context(self) -> dict:
        return {**super().get_serializer_context(), "listed": True}  # no manifest inlined (files_url)

    def get_queryset(self):
        qs = jobs_of(self.request.user).select_related("project", "owner").prefetch_related(
            "leases", Prefetch("bundles", bundles_for_lists()))
        project = self.request.query_params.get("project")
        if project:  # every member's jobs of one of my projects (~me: my personal one); another: none
            qs = jobs_in_project(qs, self.request.user, project)
        state = self.request.query_params.get("state")
        if state:
            if state not in JobState.values:
                raise ValidationError({"state": [f"Must be one of {', '.join(JobState.values)}."]})
            qs = qs.filter(state=state)
        if self.request.query_params.get("array"):  # the tasks of one of my arrays, by index (another's: 404)
            array = array_own_or_404(self.request.user, _id_param(self.request, "array"))
            qs = qs.filter(array=array).order_by("array_index")
        return qs

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT, "application/yaml": OpenApiTypes.STR,
                 "multipart/form-data": OpenApiTypes.OBJECT},
        responses={201: JobSerializer},
        parameters=[OpenApiParameter("array", int, description="GET: only the tasks of this job array, by index"),
                    OpenApiParameter("project", str, description="GET: only the jobs of this project (SPEC §9)"),
                    OpenApiParameter("dry_run", bool, description="1: validate and price only (worst case, "
                                                                  "spend limit); nothing is created (200)")],
        description="Submit a spec (SPEC §2) as JSON, YAML, or multipart with a `spec` field "
                    "(YAML or JSON text) and files referenced as `upload:<file name>`. A spec with "
                    "`array: N` answers 201 with the array (`array_id`, `job_ids` by index) instead of a job.",
    )
    def post(self, request):
        document = request.data
        attachments = {}
        dry_run = _flag_param(request, "dry_run")
        if request.content_type.startswith(("multipart/", "application/x-www-form-urlencoded")):
            text = request.data.get("spec")
            if not text:
                raise SpecError({"spec": ["This field is required (YAML or JSON text)."]})
            if hasattr(text, "read"):
                text = text.read().decode("utf-8", errors="replace")
            document = load_yaml(text)  # YAML is a superset of JSON
            files = [f for key in request.FILES for f in request.FILES.getlist(key) if key != "spec"]
            if dry_run:  # validate and price; store nothing
                return Response(job_quote(owner=request.user, document=document,
                                          attachment_names=[f.name for f in files]))
            try:
                attachments = uploads_from_files(owner=request.user, files=files)
            except ValueError as exc:
                raise SpecError({"files": [str(exc)]}) from None
        if dry_run:
            return Response(job_quote(owner=request.user, document=document))
        submitted = spec_submit(owner=request.user, document=document, attachments=attachments)
        if isinstance(submitted, ArraySubmitted):  # ``array: N``: the array and its N job ids
            return Response(array_submitted_json(submitted, request), status=status.HTTP_201_CREATED)
        return Response(JobSerializer(submitted, context={"request": request}).data, status=status.HTTP_201_CREATED)


class JobDetailView(APIView):
    @extend_schema(responses=JobSerializer)
    def get(self, request, pk: int):
        return Response(JobSerializer(job_own_or_404(request.user, pk), context={"request": request}).data)


CANCEL_DETAIL = {
    CancelEffect.RELEASED: "Cancelled while queued: released, nothing billed.",
    CancelEffect.STOPPING: "Stop asked: the run gets SIGTERM, then SIGKILL after the grace period; "
                           "billed up to the stop.",
    CancelEffect.ALREADY_STOPPING: "A cancel was already asked; the run is being stopped. Nothing more to do.",
    CancelEffect.ALREADY_RELEASED: "The job had already ended; nothing was changed.",
}


class JobCancelView(APIView):
    @extend_schema(request=None, responses=JobSerializer,
                   description="Cancel a job. The answer is the job plus `cancel`: `effect` (released, stopping, "
                               "already_stopping, already_released) and `detail` in words.")
    def post(self, request, pk: int):
        job, effect = job_cancel_effect(job=job_own_or_404(request.user, pk), by=request.user)
        data = JobSerializer(job, context={"request": request}).data
        return Response({**data, "cancel": {"effect": effect.value, "detail": CANCEL_DETAIL[effect]}})


class JobBulkCancelView(APIView):
    """``POST /api/v1/jobs/cancel/`` with ``{"ids": [1, 2, ...]}``: cancel those that are mine."""

    parser_classes = [SafeJSONParser]

    @extend_schema(
        request=inline_serializer("BulkCancelRequest",
                                  {"ids": serializers.ListField(child=serializers.IntegerField())}),
        responses=inline_serializer("BulkCancelResult", {
            "cancelled": serializers.IntegerField(), "released": serializers.IntegerField(),
            "stopping": serializers.IntegerField(), "already": serializers.IntegerField()}),
        description="Cancel several of my jobs at once (at most 500 ids). Ids that are not my jobs are ignored and "
                    "counted nowhere. `released`: queued, released at once; `stopping`: the run is being stopped; "
                    "`already`: ending or ended already; `cancelled` = released + stopping.")
    def post(self, request):
        ids = request.data.get("ids") if isinstance(request.data, dict) else None
        if not isinstance(ids, list):
            raise ValidationError({"ids": ["A list of job ids is required."]})
        try:
            done = jobs_cancel_bulk(owner=request.user, ids=bulk_ids_parse(ids))
        except BulkCancelError as exc:
            raise ValidationError({"ids": [str(exc).removeprefix("ids: ")]}) from None
        return Response({"cancelled": done.cancelled, "released": done.released,
                         "stopping": done.stopping, "already": done.already})


class JobRerunView(APIView):
    @extend_schema(request=RerunSerializer, responses={201: JobSerializer},
                   description="Run a job again: a new job (201) from its spec and the same uploaded files, "
                               "owned by you; a task of an array is re-run as one job. 400 naming "
                               "`data[i].source` when an uploaded file is no longer kept. `{\"resume\": true}`: "
                               "its first attempt starts with this job's newest kept checkpoint (400 naming "
                               "`resume` when the spec names no `checkpoint.path`).")
    def post(self, request, pk: int):
        ser = RerunSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        job = job_rerun(job=job_own_or_404(request.user, pk), by=request.user, resume=ser.validated_data["resume"])
        data = JobSerializer(job, context={"request": request}).data
        return Response({**data, "rerun_of": pk}, status=status.HTTP_201_CREATED)


class JobEventsView(APIView):
    @extend_schema(responses=JobEventSerializer(many=True))
    def get(self, request, pk: int):
        job = job_own_or_404(request.user, pk)
        return Response(JobEventSerializer(job.events.all(), many=True).data)


class JobLogsView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("offset", int,
                                     description="text: byte offset in the log (default 0); "
                                                 "lines: matching lines to skip (default: the last page)"),
                    OpenApiParameter("limit", int, description="text: bytes of the log to cover (default 1 MiB, "
                                                               "at most 4 MiB); lines: lines per page (default 500, "
                                                               "at most 5000)"),
                    OpenApiParameter("attempt", int),
                    OpenApiParameter("rank", int, description="node rank of a multi-node job (default 0)"),
                    OpenApiParameter("stream", str, enum=["stdout", "stderr"],
                                     description="only this stream (an older agent's log counts as stdout)"),
                    OpenApiParameter("q", str, description="lines containing this text, case-insensitive, "
                                                           "taken literally (implies format=lines)"),
                    OpenApiParameter("format", str, enum=["text", "lines"])],
        responses={(200, "text/plain"): OpenApiTypes.STR, (200, "application/json"): OpenApiTypes.OBJECT},
        description="Log text from byte `offset`; headers X-Log-Size and X-Next-Offset. "
                    "Each node rank of a multi-node job has its own log. With `format=lines` (or `q`): "
                    "a page of lines as JSON, each with its stream and timestamp (SPEC §5 \"Logs\").",
    )
    def get(self, request, pk: int):
        job = job_own_or_404(request.user, pk)
        try:
            query = log_query_parse(request.query_params, job)
        except LogQueryError as exc:
            raise ValidationError({exc.field: [exc.message]}) from None
        if query.lines:
            page = log_lines(job, query.attempt, query.rank, stream=query.stream or None, q=query.q,
                             offset=query.offset, limit=query.limit)
            return Response(log_page_json(job, query, page))
        current = query.attempt == job.attempt and query.rank == 0
        if current and query.offset > job.log_size:
            raise ValidationError({"offset": [f"Is past the end of the log ({job.log_size} bytes so far)."]})
        data, next_offset = log_bytes(job, query.attempt, query.rank, offset=query.offset, limit=query.limit,
                                      stream=query.stream or None)
        resp = HttpResponse(data, content_type="text/plain; charset=utf-8")
        resp["X-Log-Size"] = str(job.log_size if current else next_offset)
        resp["X-Next-Offset"] = str(next_offset)
        return resp


class JobBundleView(APIView):
    @extend_schema(parameters=[OpenApiParameter("rank", int, description="node rank of a multi-node job")],
                   responses={(200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request, pk: int):
        try:
            return bundle_response(request, job_own_or_404(request.user, pk), rank=_int_param(request, "rank", 0))
        except OutputsExpired as exc:
            return _gone(exc)


def _gone(exc: OutputsExpired, files: list[dict] | None = None) -> Response:
    """410 Gone (issue 15): the storage sweep deleted the job's outputs; ``detail`` says when, and
    the files endpoint adds the manifest (path, size_bytes, sha256), which stays."""
    body: dict = {"detail": str(exc), "expired_at": exc.expired_at.isoformat()}
    if files is not None:
        body["files"] = files
    return Response(body, status=status.HTTP_410_GONE)


# --- outputs file by file (issue 16 item 2) -----------------------------------------
RANK_PARAM = OpenApiParameter("rank", int, description="node rank of a multi-node job (default 0)")
OUTPUT_FILES = inline_serializer("OutputFile", many=True, fields={
    "path": serializers.CharField(help_text="The file's path in the bundle (as the manifest lists it)."),
    "size_bytes": serializers.IntegerField(), "sha256": serializers.CharField(),
    "url": serializers.URLField(help_text="GET: the file's bytes (HTTP Range supported)."),
})


def _latest_bundle(request, job):
    """The latest attempt's bundle of ``?rank=`` (default 0), or a 404 saying there is none;
    :class:`OutputsExpired` when the storage sweep deleted it."""
    rank = _int_param(request, "rank", 0)
    bundle = bundle_latest(job, rank=rank)
    if bundle is not None:
        bundle_check_kept(bundle)
    if bundle is None or not bundle.file:
        raise NotFound(f"Job {job.pk} has no bundle on rank {rank} (yet).")
    return bundle


class JobFilesView(APIView):
    @extend_schema(
        parameters=[RANK_PARAM],
        responses=inline_serializer("OutputFiles", {
            "attempt": serializers.IntegerField(), "rank": serializers.IntegerField(),
            "offsets": serializers.BooleanField(
                help_text="Whether each file can be fetched on its own: false for a bundle.tar.gz from "
                          "an older agent, whose file URLs answer 409."),
            "files": OUTPUT_FILES,
        }),
        description="The output files of the job's latest bundle on node `rank`: path, size, sha256 "
                    "and the URL of each file. 404 when the job has no bundle (yet); 410 when the storage "
                    "sweep deleted it (the body keeps the manifest: path, size_bytes, sha256).",
    )
    def get(self, request, pk: int):
        job = job_own_or_404(request.user, pk)
        try:
            bundle = _latest_bundle(request, job)
        except OutputsExpired as exc:
            rank_bundle = bundle_latest(job, rank=_int_param(request, "rank", 0))
            return _gone(exc, [{"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256}
                               for f in bundle_files(rank_bundle)])
        query = f"?rank={bundle.rank}" if bundle.rank else ""
        files = [{"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256,
                  "url": request.build_absolute_uri(reverse("api:job-file", args=[job.pk, f.path]) + query)}
                 for f in bundle_files(bundle)]
        return Response({"attempt": bundle.attempt, "rank": bundle.rank, "offsets": addressable(bundle),
                         "files": files})


class JobFileView(APIView):
    @extend_schema(
        parameters=[RANK_PARAM,
                    OpenApiParameter("inline", bool, description="1: Content-Disposition inline for a "
                                     "PNG, JPEG, GIF or WebP image, JSON, CSV or text (never SVG)")],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                   (206, "application/octet-stream"): OpenApiTypes.BINARY},
        description="One output file's bytes, read from the stored bundle at its offset (nothing "
                    "unpacked). HTTP Range within the file (206, Content-Range relative to the file), "
                    "If-Range; ETag is the file's sha256; Content-Type from its name. `path` must be "
                    "exactly as the file list gives it (404 otherwise); 409 for a bundle.tar.gz from an "
                    "older agent (no offsets): download the whole bundle.",
    )
    def get(self, request, pk: int, path: str):
        job = job_own_or_404(request.user, pk)
        try:
            f = bundle_file(_latest_bundle(request, job), path)
        except OutputsExpired as exc:
            return _gone(exc)
        if f is None:
            raise NotFound(f"No file {path!r} in the bundle of job {job.pk}.")
        inline = request.query_params.get("inline", "").lower() in ("1", "true", "yes")
        try:
            return output_file_response(request, f, inline=inline)
        except NotAddressable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


# --- job arrays (apps.jobs.arrays) ------------------------------------------------
def array_submitted_json(submitted: ArraySubmitted, request) -> dict:
    """The 201 of an array submit: the array (as ``GET /api/v1/arrays/{id}/``) with ``array_id``
    and ``job_ids`` (``job_ids[i]`` is task ``i``'s job)."""
    array = submitted.array
    counts = {array.pk: ArrayCounts({JobState.QUEUED: array.size}, {})}  # all just queued: no query
    data = ArraySerializer(array, context={"request": request, "counts": counts}).data
    return {"array_id": array.pk, **data, "job_ids": submitted.job_ids}


class ArrayListView(generics.ListAPIView):
    """``GET``: my job arrays, newest first, each with its tasks' counts by state."""

    serializer_class = ArraySerializer

    def get_queryset(self):
        return arrays_of(self.request.user)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        counts = array_counts(a.pk for a in page)  # one aggregate query for the page
        data = ArraySerializer(page, many=True, context={"request": request, "counts": counts}).data
        return self.get_paginated_response(data)


class ArrayDetailView(APIView):
    @extend_schema(responses=ArraySerializer)
    def get(self, request, pk: int):
        return Response(ArraySerializer(array_own_or_404(request.user, pk), context={"request": request}).data)


class ArrayCancelView(APIView):
    @extend_schema(request=None, responses=inline_serializer("ArrayCancelled", {
        "released": serializers.IntegerField(), "stopping": serializers.IntegerField(),
        "array": ArraySerializer()}),
        description="Cancel every task of the array not released yet (idempotent): queued tasks are "
                    "released at once, running ones stopped by their nodes.")
    def post(self, request, pk: int):
        array = array_own_or_404(request.user, pk)
        done = array_cancel(array=array, by=request.user)
        return Response({"released": done.released, "stopping": done.stopping,
                         "array": ArraySerializer(array, context={"request": request}).data})
