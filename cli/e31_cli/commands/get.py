"""``e31 get ID [-o DIR]``: download a job's bundle (resumable, with a progress bar), check its
sha256, unpack it, and check every file against the manifest; ``e31 get --array ID``: the same
for every task of a job array, each into ``DIR/task-<index>`` (issue 28 item 3)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from ..download import fetch, unpack, verify
from ..errors import CliError, Exit
from ..follow import array_tasks
from ..output import cell, size, state_text

if TYPE_CHECKING:
    from ..client import Api
    from ..context import Ctx


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``get``."""
    p = sub.add_parser("get", parents=[common], help="download, verify and unpack a job's outputs",
                       description="Download job ID's bundle into DIR (default ./job-ID; a multi-node job's "
                                   "ranks into DIR/rank-N), resuming an interrupted download, check the "
                                   "archive's sha256, unpack it and check every file's sha256 against the "
                                   "manifest. Exit 9 on any mismatch, 3 when the job has no bundle yet.")
    p.add_argument("job_id", metavar="ID", type=int, nargs="?")
    p.add_argument("--array", metavar="ARRAY", type=int, default=None,
                   help="every task of job array ARRAY, each into DIR/task-INDEX (default DIR ./array-ARRAY)")
    p.add_argument("-o", "--output", metavar="DIR", help="where to unpack (default ./job-ID)")
    p.add_argument("--keep-archive", action="store_true", help="keep the downloaded archive beside the files")
    p.set_defaults(func=get)


def _bundles(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's bundles, one per node rank.

    Raises:
        CliError: exit 3 while the job runs, exit 1 when it ended without a bundle (it did not succeed).
    """
    bundle = job.get("bundle")
    if not bundle:
        if job["state"] != "released":
            raise CliError(f"job {job['id']} is {job['state']}: its bundle comes when it is released "
                           f"(`e31 logs -f {job['id']}` follows it)", Exit.PENDING)
        reason = f": {job['status_message']}" if job.get("status_message") else ""
        raise CliError(f"job {job['id']} ended {job.get('outcome')} without a bundle{reason}", Exit.JOB_FAILED)
    return bundle.get("ranks") or [bundle]


def get(args: argparse.Namespace, ctx: Ctx) -> int:
    """Fetch, verify and unpack every bundle of the job (or of every task of ``--array``).

    Raises:
        CliError: exit 2 without an ID or ``--array``, or with both.
    """
    if (args.job_id is None) == (args.array is None):
        raise CliError("give a job ID or --array ARRAY (not both)", Exit.USAGE)
    if args.array is not None:
        return _get_array(args, ctx)
    out = ctx.out
    with ctx.api() as api:
        job = api.job(args.job_id)
        bundles = _bundles(job)
        root = Path(args.output or f"job-{job['id']}")
        results = []
        for bundle in bundles:
            rank = bundle.get("rank") or 0
            target = root / f"rank-{rank}" if len(bundles) > 1 else root
            results.append(_one(api, ctx, job, bundle, target, keep=args.keep_archive))
    if out.json_mode:
        out.emit({"job_id": job["id"], "state": job["state"], "outcome": job.get("outcome"), "bundles": results})
    else:
        files = sum(len(r["files"]) for r in results)
        out.print(f"job {job['id']} ({state_text(job)}): {files} files in [bold]{cell(root)}[/], every sha256 "
                  "checked against the manifest")
    return Exit.OK


def _get_array(args: argparse.Namespace, ctx: Ctx) -> int:
    """Every released task's bundles into ``DIR/task-<index>``; exit 0 when every task's came,
    3 while a task has not ended, 1 when one ended without a bundle."""
    root = Path(args.output or f"array-{args.array}")
    fetched, missing, pending = [], [], 0
    with ctx.api() as api:
        for task in sorted(array_tasks(api, args.array), key=lambda t: t["array_index"]):
            if task["state"] != "released":
                pending += 1
                continue
            job = api.job(task["id"])  # the list carries no manifest: the job's own answer does
            if not job.get("bundle"):
                missing.append(task["array_index"])
                continue
            bundles = job["bundle"].get("ranks") or [job["bundle"]]
            target = root / f"task-{task['array_index']}"
            for bundle in bundles:
                rank = bundle.get("rank") or 0
                fetched.append(_one(api, ctx, job, bundle, target / f"rank-{rank}" if len(bundles) > 1 else target,
                                    keep=args.keep_archive) | {"array_index": task["array_index"], "job_id": job["id"]})
    if ctx.out.json_mode:
        ctx.out.emit({"array_id": args.array, "bundles": fetched, "without_bundle": missing, "not_ended": pending})
    else:
        ctx.out.print(f"array {args.array}: {len(fetched)} bundle(s) in [bold]{cell(root)}[/], every sha256 checked"
                      + (f"; {pending} task(s) not ended yet" if pending else "")
                      + (f"; tasks {', '.join(map(str, missing))} ended without a bundle" if missing else ""))
    return Exit.PENDING if pending else Exit.JOB_FAILED if missing else Exit.OK


def _one(api: Api, ctx: Ctx, job: dict[str, Any], bundle: dict[str, Any], target: Path, *, keep: bool
         ) -> dict[str, Any]:
    rank = bundle.get("rank") or 0
    target.mkdir(parents=True, exist_ok=True)
    archive = target / f".job-{job['id']}-bundle-rank{rank}-{bundle['sha256'][:12]}"
    path = f"/jobs/{job['id']}/bundle/" + (f"?rank={rank}" if rank else "")
    total = bundle["size_bytes"]
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=ctx.out.err, disable=ctx.out.json_mode,
                  transient=False) as progress:
        task = progress.add_task(f"job {job['id']} bundle" + (f" rank {rank}" if rank else ""), total=total)
        fetched = fetch(api, path, archive, size=total, sha256=bundle["sha256"],
                        advance=lambda n: progress.update(task, completed=n))
    if fetched.resumed_from:
        ctx.out.note(f"[dim]resumed at byte {fetched.resumed_from:,} of {total:,}[/]")
    unpack(archive, target)
    files = verify(target, bundle.get("files") or [])
    kept = None
    if keep:
        kept = target / f"job-{job['id']}-bundle{f'-rank{rank}' if rank else ''}{_suffix(archive)}"
        archive.replace(kept)
    else:
        archive.unlink()
    ctx.out.note(f"[dim]{len(files)} files, {size(sum(f['size_bytes'] for f in files))}, sha256 verified[/]")
    return {"rank": rank, "dir": str(target), "size_bytes": total, "sha256": bundle["sha256"],
            "resumed_from": fetched.resumed_from, "archive": str(kept) if kept else None, "files": files}


def _suffix(archive: Path) -> str:
    """``.tar.gz`` for a gzip archive, else ``.tar``."""
    with archive.open("rb") as fh:
        return ".tar.gz" if fh.read(2) == b"\x1f\x8b" else ".tar"
