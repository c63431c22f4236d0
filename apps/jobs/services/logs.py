"""Log storage: the bytes an agent streams, per attempt and node rank (SPEC §3, "run"; §5 "Logs").

While a job lives its log is kept as :class:`~apps.jobs.models.LogChunk` rows, each with the
stream it came from (stdout, stderr, or "combined" from an agent that does not tell them apart)
and the agent's clock when it read the bytes. At release :func:`log_compact` writes each
attempt's chunks into ONE object of Django's default storage, ``logs/<job_id>/attempt-<n>.jsonl.gz``,
records it in ``Job.log_objects`` and deletes the rows; reads (:func:`log_pieces`) then come from
the object. Only the Storage API (``default_storage.save/open/delete``) is used, never a local path.

The object is gzip-compressed JSON Lines: a header ``{"format": "e31-log/1", "job": id,
"attempt": n}`` then one record per chunk in (rank, offset) order: ``{"rank", "offset", "stream",
"at" (ISO 8601 or null), "text"}`` when the bytes are valid UTF-8, else ``"b64"`` (base64) in
place of ``"text"``.
"""
from __future__ import annotations

import base64
import gzip
import heapq
import io
import json
import logging
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from apps.jobs import signals
from apps.jobs.logquery import LogQuery
from apps.jobs.models import Job, LogChunk, LogStream

log = logging.getLogger(__name__)

LOG_OBJECT_FORMAT = "e31-log/1"


def log_object_name(job_id: int, attempt: int) -> str:
    """The storage name of an attempt's compacted log (retention deletes ``logs/<job_id>/``)."""
    return f"logs/{job_id}/attempt-{attempt}.jsonl.gz"


def _compacted(job: Job, attempt: int) -> dict | None:
    entry = (job.log_objects or {}).get(str(attempt))
    return entry if isinstance(entry, dict) else None


def log_append(*, job_id: int, attempt: int, rank: int, offset: int, data: bytes,
               stream: str = LogStream.COMBINED, at: datetime | None = None) -> int:
    """Store bytes of the attempt's log on node rank ``rank`` at byte ``offset``; bytes already
    stored are skipped. The caller has checked that the sender holds that rank of the attempt
    (:func:`apps.agent_api.reports.agent_log_append`).

    ``stream`` is "stdout", "stderr" or "combined" (an agent that does not tell them apart);
    ``at`` is when the agent read the bytes (agent clock), None if it did not say.

    Returns the size of that rank's log now stored (bytes). Each rank's log is capped at
    ``E31_LOG_MAX_BYTES``; the first chunk past the cap is cut and a marker line appended.
    Once the attempt's log is compacted (the job was released) nothing more is stored and the
    size compacted is returned (the agent then stops sending).

    Raises:
        ValueError: ``offset`` is past the bytes stored (a gap).
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        done = _compacted(job, attempt)
        if done is not None:
            return int((done.get("sizes") or {}).get(str(rank), 0))
        if rank == 0:
            size, cut = job.log_size, job.log_truncated
        else:
            last = LogChunk.objects.filter(job=job, attempt=attempt, node_rank=rank).order_by("-offset").first()
            size = last.offset + len(last.data) if last else 0
            cut = size > settings.E31_LOG_MAX_BYTES
        if cut or offset + len(data) <= size:
            return size
        if offset > size:
            raise ValueError(f"offset {offset} is past the {size} bytes stored")
        data = data[size - offset:]
        room = settings.E31_LOG_MAX_BYTES - size
        truncated = len(data) > room
        if truncated:
            data = data[:room] + b"\n[log cut: this job wrote more than the site keeps]\n"
        LogChunk.objects.create(job=job, attempt=attempt, node_rank=rank, offset=size, data=data,
                                stream=stream, at=at)
        if rank == 0:  # the page's live tail is rank 0's
            Job.objects.filter(pk=job.pk).update(log_size=size + len(data), log_truncated=truncated)
            signals.log_appended.send(sender=Job, job_id=job.pk, attempt=attempt, offset=size, data=data,
                                      log_size=size + len(data), stream=stream, at=at)
        return size + len(data)


@dataclass(frozen=True)
class LogPiece:
    """Bytes ``[offset, offset + len(data))`` of one rank's log, all from one stream.

    ``stream``: "stdout", "stderr" or "combined"; ``at``: agent clock when read, or None.
    """

    offset: int
    data: bytes
    stream: str
    at: datetime | None


def _object_records(name: str) -> Iterable[dict]:
    with default_storage.open(name, "rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if "offset" in record:
                yield record


def log_pieces(job: Job, attempt: int, rank: int = 0, *, start: int = 0,
               end: int | None = None) -> list[LogPiece]:
    """The pieces of ``job``'s log (attempt, rank) that overlap bytes ``[start, end)``, in order;
    from the database while the job lives, from its storage object once compacted. A compacted
    object that is gone (retention deleted it) reads as an empty log.
    """
    return list(log_pieces_iter(job, attempt, rank, start=start, end=end))


def log_pieces_iter(job: Job, attempt: int, rank: int = 0, *, start: int = 0,
                    end: int | None = None) -> Iterator[LogPiece]:
    """:func:`log_pieces` one piece at a time: memory stays one piece (at most a chunk, or one
    record of the compacted object) however long the log."""
    done = _compacted(job, attempt)
    if done is not None:
        pieces: list[LogPiece] = []
        try:
            # The object holds its records in (rank, offset) order (log_compact writes them so).
            for r in _object_records(done["name"]):
                data = r["text"].encode() if "text" in r else base64.b64decode(r.get("b64", ""))
                if r.get("rank", 0) != rank or r["offset"] + len(data) <= start:
                    continue
                if end is not None and r["offset"] >= end:
                    continue
                at = datetime.fromisoformat(r["at"]) if r.get("at") else None
                pieces.append(LogPiece(r["offset"], data, r.get("stream") or LogStream.COMBINED, at))
                if len(pieces) > 1:
                    yield pieces.pop(0)
        except (OSError, ValueError, KeyError):
            log.warning("log object %s of job %s cannot be read", done.get("name"), job.pk, exc_info=True)
            return
        yield from pieces
        return
    chunks = LogChunk.objects.filter(job=job, attempt=attempt, node_rank=rank,
                                     offset__gte=max(0, start - settings.E31_LOG_MAX_BYTES))
    if end is not None:
        chunks = chunks.filter(offset__lt=end)
    for offset, raw, stream, at in chunks.order_by("offset").values_list("offset", "data", "stream", "at").iterator(
            chunk_size=64):
        data = bytes(raw)
        if offset + len(data) > start:
            yield LogPiece(offset, data, stream, at)


def log_bytes(job: Job, attempt: int, rank: int = 0, *, offset: int = 0, limit: int = 1024 * 1024,
              stream: str | None = None) -> tuple[bytes, int]:
    """Bytes of the log from byte ``offset`` over at most ``limit`` bytes of the log.

    With ``stream`` ("stdout"/"stderr") only that stream's bytes in the window are returned
    ("combined" pieces, from an older agent, count as stdout).

    Returns:
        ``(data, next_offset)``: ``next_offset`` is where the window read ends in the log
        (``offset`` + bytes of the log covered), to pass as the next ``offset``.
    """
    out = bytearray()
    stop = offset + limit
    covered = offset
    for piece in log_pieces(job, attempt, rank, start=offset, end=stop):
        lo = max(offset, piece.offset) - piece.offset
        hi = min(stop, piece.offset + len(piece.data)) - piece.offset
        covered = max(covered, piece.offset + hi)
        if stream is None or _stream_of(piece.stream) == stream:
            out += piece.data[lo:hi]
    return bytes(out), covered


def _stream_of(stream: str) -> str:
    return LogStream.STDERR if stream == LogStream.STDERR else LogStream.STDOUT


@dataclass(frozen=True)
class LogLine:
    """One line of a log: ``n`` its number in the whole log (1-based, all streams counted),
    ``offset`` its first byte, ``stream``, ``at`` (agent clock of its piece, or None) and its
    text (UTF-8, undecodable bytes replaced; the newline dropped)."""

    n: int
    offset: int
    stream: str
    at: datetime | None
    text: str
    newline: bool = True  # False: the stream has not ended the line (yet)

    @property
    def stderr(self) -> bool:
        """True for a line the command wrote to stderr."""
        return self.stream == LogStream.STDERR

    def as_dict(self) -> dict:
        """The line as the API shows it (``at`` in ISO 8601)."""
        return {"n": self.n, "offset": self.offset, "stream": self.stream,
                "at": self.at.isoformat() if self.at else None, "text": self.text}


LineRecord = tuple[int, str, "datetime | None", bytes, bool]  # start, stream, at, bytes, newline
MAX_WAITING_LINES = 10_000  # complete lines held back behind one still open, at most (then it is cut)


def line_records(pieces: Iterable[LogPiece]) -> Iterator[LineRecord]:
    """The lines of ``pieces`` (in offset order) as ``(first byte, stream, at, bytes, newline)``, in
    order of their first byte, one at a time. A line a stream leaves open is continued by that
    stream's next piece (stdout and stderr interleave without mixing). Memory: the lines still open
    (one per stream) and at most :data:`MAX_WAITING_LINES` complete lines behind them (past that
    the open lines are cut where they stand), never the whole log."""
    open_: dict[str, tuple[int, datetime | None, list[bytes]]] = {}
    ready: list[tuple[int, int, LineRecord]] = []  # a heap by first byte
    seq = 0
    for piece in pieces:
        start, at, parts = open_.pop(piece.stream, (piece.offset, piece.at, []))
        *complete, rest = piece.data.split(b"\n")
        pos = piece.offset
        for text in complete:
            parts.append(text)
            heapq.heappush(ready, (start, seq, (start, piece.stream, at, b"".join(parts), True)))
            seq += 1
            pos += len(text) + 1
            start, at, parts = pos, piece.at, []
        if rest:
            parts.append(rest)
        if parts:
            open_[piece.stream] = (start, at, parts)
        if len(ready) > MAX_WAITING_LINES:
            # A line one stream leaves open (a progress bar with no newline) would hold every later
            # line of the others back: cut it here, as a line of its own (``newline`` False), and
            # carry on its bytes as a new line.
            for stream, (first, at_, parts_) in list(open_.items()):
                if first < ready[0][0]:  # a line that holds the waiting ones back
                    heapq.heappush(ready, (first, seq, (first, stream, at_, b"".join(parts_), False)))
                    seq += 1
                    del open_[stream]
        # A line starting before every line still open can no longer be overtaken: later pieces
        # only start lines after this one's end.
        horizon = min((first for first, _, _ in open_.values()), default=None)
        while ready and (horizon is None or ready[0][0] < horizon):
            yield heapq.heappop(ready)[2]
    for stream, (start, at, parts) in open_.items():
        heapq.heappush(ready, (start, seq, (start, stream, at, b"".join(parts), False)))
        seq += 1
    while ready:
        yield heapq.heappop(ready)[2]


def _line(n: int, record: LineRecord) -> LogLine:
    start, stream, at, text, newline = record
    return LogLine(n, start, stream, at, text.decode("utf-8", errors="replace"), newline)


def lines_of(pieces: Iterable[LogPiece], *, first_n: int = 1) -> list[LogLine]:
    """Split pieces into lines (:func:`line_records`), numbered from ``first_n``."""
    return [_line(first_n + i, record) for i, record in enumerate(line_records(pieces))]


@dataclass(frozen=True)
class LogPage:
    """A page of log lines: ``lines`` the page, ``total`` how many lines match in all,
    ``offset`` how many matching lines come before this page."""

    lines: list[LogLine]
    total: int
    offset: int

    @property
    def end(self) -> int:
        """Matching lines up to the end of this page."""
        return self.offset + len(self.lines)


def log_lines(job: Job, attempt: int, rank: int = 0, *, stream: str | None = None, q: str = "",
              offset: int | None = None, limit: int = 500) -> LogPage:
    """A page of the whole kept log (attempt, rank) as lines, filtered and searched on the server.

    One pass over the log (at most ``E31_LOG_MAX_BYTES`` per rank), holding only the page: memory is
    O(``limit``) lines whatever the log's length (issue 26: a 4,000,000-line log read whole took
    +1 GB and 113 s a request).

    Args:
        stream: "stdout" or "stderr" keeps that stream's lines only ("combined" lines count as stdout).
        q: keep lines containing this text, case-insensitive, taken literally (no pattern).
        offset: matching lines to skip; None: the last page (the tail). Past the end: an empty page.
        limit: lines per page.
    """
    # An ASCII needle is matched on the bytes (no decode per line); any other on the decoded text,
    # so case folding stays Unicode's.
    needle = re.compile(re.escape(q.encode() if q.isascii() else q), re.IGNORECASE) if q else None
    window: deque[tuple[int, LineRecord]] = deque(maxlen=limit if offset is None else None)
    total = 0
    for n, record in enumerate(line_records(log_pieces_iter(job, attempt, rank)), start=1):
        if stream and _stream_of(record[1]) != stream:
            continue
        if needle is not None and not needle.search(
                record[3] if q.isascii() else record[3].decode("utf-8", errors="replace")):
            continue
        if offset is None or offset <= total < offset + limit:
            window.append((n, record))
        total += 1
    if offset is None:
        offset = max(0, total - limit)
    return LogPage([_line(n, record) for n, record in window], total, offset)


def log_compact(job_id: int) -> list[str]:
    """Write each attempt's log chunks of a released job into one storage object
    (:func:`log_object_name`), record it in ``Job.log_objects`` and delete the chunks.

    Idempotent: an attempt already compacted is skipped; an object left by a compaction that
    died before recording it is overwritten. Returns the names written.
    """
    written = []
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        attempts = sorted(set(LogChunk.objects.filter(job=job).values_list("attempt", flat=True)))
        objects = dict(job.log_objects or {})
        for attempt in attempts:
            chunks = LogChunk.objects.filter(job=job, attempt=attempt)
            if str(attempt) in objects:
                chunks.delete()  # stray rows after a compaction: the object is the record
                continue
            buf = io.BytesIO()
            sizes: dict[str, int] = {}
            with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
                header = {"format": LOG_OBJECT_FORMAT, "job": job.pk, "attempt": attempt}
                gz.write(json.dumps(header).encode() + b"\n")
                for c in chunks.order_by("node_rank", "offset").iterator():
                    data = bytes(c.data)
                    record = {"rank": c.node_rank, "offset": c.offset, "stream": c.stream,
                              "at": c.at.isoformat() if c.at else None}
                    try:
                        record["text"] = data.decode("utf-8")
                    except UnicodeDecodeError:
                        record["b64"] = base64.b64encode(data).decode()
                    gz.write(json.dumps(record).encode() + b"\n")
                    sizes[str(c.node_rank)] = c.offset + len(data)
            name = log_object_name(job.pk, attempt)
            if default_storage.exists(name):
                default_storage.delete(name)
            saved = default_storage.save(name, ContentFile(buf.getvalue()))
            objects[str(attempt)] = {"name": saved, "sizes": sizes}
            chunks.delete()
            written.append(saved)
        if written:
            Job.objects.filter(pk=job.pk).update(log_objects=objects)
    return written


def log_page_json(job: Job, query: LogQuery, page: LogPage) -> dict:
    """A page of lines as the API answers it (SPEC §5 "Logs"): the query echoed, ``total``
    matching lines, ``offset`` of this page, ``next_offset``/``prev_offset`` (None at an end),
    ``compacted`` (read from the storage object) and the lines."""
    end = page.offset + len(page.lines)
    return {
        "job": job.pk, "attempt": query.attempt, "rank": query.rank, "stream": query.stream or None,
        "q": query.q, "total": page.total, "offset": page.offset, "limit": query.limit,
        "next_offset": end if end < page.total else None,
        "prev_offset": max(0, page.offset - query.limit) if page.offset > 0 else None,
        "compacted": _compacted(job, query.attempt) is not None,
        "lines": [line.as_dict() for line in page.lines],
    }
