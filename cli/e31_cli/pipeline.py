"""A pipeline file: several job specs, one a step, each waiting for steps above it (SPEC §7 "Pipelines").

```yaml
pipeline: nightly                  # optional: the default job names are <pipeline>-<step>
project: ml-team                   # optional: every step's project, unless the step names one
steps:                             # in the order they are submitted
  preprocess: {...a job spec...}
  train: {array: 4, after: [{step: preprocess}], ...}
  evaluate: {after: [{step: train, when: succeeded}], ...}
```

An ``after`` entry ``{step: NAME}`` (``when`` as in SPEC §2) names a step above this one; at
submit it becomes ``{job: ID}`` or, for a step that was an array, ``{array: ID}``. The server
knows nothing of pipelines: each step is one ``POST /api/v1/jobs/``. This module only reads and
checks the file (:func:`read_pipeline`) and writes each step's spec (:func:`step_document`); the
submitting is :mod:`e31_cli.commands.pipelines`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CliError, Exit
from .specfile import SpecFile, attachments_of

TOP_LEVEL = ("pipeline", "project", "steps")
STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
MAX_STEPS = 100
NAME_MAX = 100  # a job name's longest (SPEC §2)


@dataclass(frozen=True)
class Step:
    """One step: its name, its spec as written (``after`` still naming steps) and its files."""

    name: str
    document: dict[str, Any]
    attachments: list[tuple[str, Path]]

    def needs(self) -> list[str]:
        """The steps this one waits for, in its ``after`` order."""
        return [item["step"] for item in self.document.get("after") or [] if isinstance(item, dict) and "step" in item]


@dataclass(frozen=True)
class Pipeline:
    """A checked pipeline file: its name, its top-level ``project`` (None: not given) and its steps in order."""

    path: Path
    name: str
    project: str | None
    steps: list[Step]


@dataclass
class Submitted:
    """What one step's submit answered: a job (``kind`` "job", ``id`` the job's) or an array
    (``kind`` "array", ``id`` the array's); ``job_ids``: its jobs (one for a job)."""

    step: str
    kind: str
    id: int
    name: str
    job_ids: list[int]
    after: list[dict[str, Any]] = field(default_factory=list)

    def ref(self, when: Any = None) -> dict[str, Any]:
        """The ``after`` entry that waits for this step."""
        return {self.kind: self.id, **({"when": when} if when is not None else {})}

    def words(self) -> str:
        """``job 5`` or ``array 3, jobs 6..9``."""
        if self.kind == "job":
            return f"job {self.id}"
        span = f"{self.job_ids[0]}..{self.job_ids[-1]}" if len(self.job_ids) > 1 else str(self.job_ids[0])
        return f"array {self.id}, jobs {span}"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "name": self.name, f"{self.kind}_id": self.id, "job_ids": self.job_ids,
                "after": self.after}


def is_pipeline(document: Any) -> bool:
    """Whether a parsed spec file is a pipeline (it has ``steps``) rather than one job spec."""
    return isinstance(document, dict) and "steps" in document


def read_pipeline(spec: SpecFile) -> Pipeline:
    """The pipeline in ``spec`` (a file :func:`is_pipeline` said yes to), every step reference checked.

    Raises:
        CliError: (usage, exit 2) with ``fields`` naming each problem (``steps.<name>.after[i]``:
            a step not in the file, one further down, or the step itself; ``steps.<name>``: not a
            mapping, a bad name, an ``upload:`` file not beside the file), before anything is sent.
    """
    document = spec.document
    errors: dict[str, list[str]] = {}
    for key in document:
        if key not in TOP_LEVEL:
            errors[str(key)] = [f"unknown field of a pipeline file (it has {', '.join(TOP_LEVEL)})"]
    name = document.get("pipeline", spec.path.stem)
    if not isinstance(name, str) or not name.strip():
        errors["pipeline"] = ["must be a name (text)"]
        name = spec.path.stem
    project = document.get("project")
    if project is not None and (not isinstance(project, str) or not project.strip()):
        errors["project"] = ["must be a project's name"]
        project = None
    raw_steps = document.get("steps")
    if not isinstance(raw_steps, dict) or not raw_steps:
        errors["steps"] = ["must map each step's name to its job spec, in order (steps: {prepare: {...}, ...})"]
        raw_steps = {}
    elif len(raw_steps) > MAX_STEPS:
        errors["steps"] = [f"at most {MAX_STEPS} steps"]
    order = [str(k) for k in raw_steps]
    folder = spec.path.resolve().parent
    steps: list[Step] = []
    for position, (key, body) in enumerate(raw_steps.items()):
        where = f"steps.{key}"
        if not STEP_NAME.match(str(key)):
            errors[where] = ["a step's name is 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"]
            continue
        if not isinstance(body, dict):
            errors[where] = ["must be a job spec (a mapping: name, work, compute, ...)"]
            continue
        errors.update(_after_errors(str(key), body.get("after"), order[:position], order))
        try:
            attachments = attachments_of(body, folder)
        except CliError as exc:
            errors[where] = [exc.message]
            attachments = []
        steps.append(Step(str(key), body, attachments))
    if errors:
        raise CliError(f"{spec.path}: not a pipeline that can be submitted ({len(errors)} problem(s)); "
                       "nothing was submitted", Exit.USAGE, fields=errors)
    return Pipeline(spec.path, name.strip(), project.strip() if project else None, steps)


def _after_errors(step: str, after: Any, above: list[str], every: list[str]) -> dict[str, list[str]]:
    """The problems of step ``step``'s ``after`` entries that name steps (the server checks the rest)."""
    if after is None:
        return {}
    if not isinstance(after, list):
        return {f"steps.{step}.after": ["must be a list of entries ({step: NAME}, {job: ID} or {array: ID})"]}
    errors: dict[str, list[str]] = {}
    for i, item in enumerate(after):
        if not isinstance(item, dict) or "step" not in item:
            continue
        where, target = f"steps.{step}.after[{i}]", item["step"]
        unknown = sorted(str(k) for k in item if k not in ("step", "when", "job", "array"))
        if "job" in item or "array" in item:
            errors[where] = ["names a step and a job or array: one of them"]
        elif unknown:
            errors[where] = [f"unknown field(s) {', '.join(unknown)} (an entry is {{step: NAME, when: ...}})"]
        elif not isinstance(target, str) or target not in every:
            errors[where] = [f"no step {target!r} in this pipeline (its steps: {', '.join(every)})"]
        elif target == step:
            errors[where] = [f"step {target!r} waits for itself"]
        elif target not in above:
            errors[where] = [f"step {target!r} comes after {step!r}: a step can wait only for a step above it "
                             "(move it up)"]
    return errors


def step_document(step: Step, submitted: dict[str, Submitted], *, pipeline: str) -> dict[str, Any]:
    """Step ``step``'s spec to send: its ``{step: NAME}`` entries replaced by the job or array that
    step was submitted as, and ``name`` ``<pipeline>-<step>`` when it has none.

    ``submitted``: the steps above it, by name; a step not in it (a dry run, before anything was
    submitted) has its entries left out.
    """
    document = dict(step.document)
    if "name" not in document:
        document = {"name": f"{pipeline}-{step.name}"[:NAME_MAX], **document}
    if "after" in document:
        after = []
        for item in document["after"]:
            if isinstance(item, dict) and "step" in item:
                if item["step"] in submitted:
                    after.append(submitted[item["step"]].ref(item.get("when")))
            else:
                after.append(item)
        if after:
            document["after"] = after
        else:
            del document["after"]
    return document
