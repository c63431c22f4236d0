"""The job spec (SPEC §2): one validator for the form, YAML and JSON.

:func:`parse_spec` takes the decoded document (a dict, whatever its source)
and returns a :class:`JobSpec` or raises :class:`SpecError` whose
``errors`` map a field path (``compute.gpus``, ``data[0].source``) to
messages, ready to be the body of an HTTP 400. Unknown fields are errors.
Checks that need the database or the pool (uploads, what nodes exist) live
in :mod:`apps.jobs.services`.
"""
from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from e31_protocol.redact import redact_value
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from apps.core.choices import JobKind
from apps.core.types import MAX_GPUS_PER_NODE, MAX_NODES, ComputeRequest
from apps.core.units import format_duration, gb_to_mib, parse_duration

from .addresses import source_address_problem

ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# An OCI image reference (the distribution spec's grammar, shortened): an optional registry host
# (with a dot or a port, or localhost), path components in lower case, a tag, a digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::[0-9]+)?|\[[0-9a-fA-F:]+\](?::[0-9]+)?)/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SOURCE_SCHEMES = ("https://", "s3://", "gs://", "upload:", "file://")
MAX_ENV_KEYS = 100
MAX_DATA = 100
MAX_OUTPUT_PATHS = 100
MAX_ARRAY = 10_000  # tasks in one job array (SPEC §2)
MAX_SECRETS = 100  # names in work.secrets
MAX_AFTER = 100  # entries of after (job dependencies)
CREDENTIAL_SCHEMES = ("s3://", "gs://")  # sources data[i].credentials may apply to


class SpecError(Exception):
    """A spec failed validation.

    Attributes:
        errors: ``{"field.path": ["message", ...]}``.
    """

    def __init__(self, errors: dict[str, list[str]]):
        errors = redact_value(errors)  # an error quoting a URL shows its userinfo and signature as ***
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def check_relative_path(value: str, *, allow_dot: bool = False) -> str:
    """Check that ``value`` stays inside the job dir: no ``..``, not absolute, no NUL.

    Raises:
        ValueError: the path could leave the job dir.
    """
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    if not value.strip():
        raise ValueError("must not be empty")
    if value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value):
        raise ValueError("must be relative to the job dir, not absolute")
    if ".." in re.split(r"[/\\]", value):
        raise ValueError("must stay inside the job dir (no '..')")
    if not allow_dot and value.strip() in (".", "./"):
        raise ValueError("must name something inside the job dir")
    if len(value) > 1000:
        raise ValueError("must be at most 1000 characters")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WorkSpec(_Strict):
    command: Annotated[StrictStr, Field(min_length=1, max_length=20_000)]
    image: Annotated[StrictStr, Field(min_length=1, max_length=500)] | None = None
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    kind: Literal["training", "inference", "processing", "simulation", "other"] = JobKind.OTHER.value
    network: Literal["egress", "none"] = "egress"
    # names of the owner's secrets put into the job's environment (SPEC §2, issue 23): names only, never values
    secrets: list[StrictStr] = Field(default_factory=list, max_length=MAX_SECRETS)
    # the name of a secret {"username", "password"} the image is pulled with (SPEC §2, issue 23)
    image_credentials: StrictStr | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value and not value.endswith(".sif") \
                and not IMAGE_REFERENCE.fullmatch(value):
            raise ValueError("is not an image reference: [registry[:port]/]name[:tag][@sha256:digest], "
                             "lower-case name")
        return value

    @field_validator("image_credentials")
    @classmethod
    def _image_credentials(cls, value: str | None) -> str | None:
        if value is not None and not ENV_KEY.fullmatch(value):
            raise ValueError("must name a secret: [A-Z_][A-Z0-9_]*")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain a NUL character")
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_numbers(cls, value: Any) -> Any:
        """``SEED: 1`` means the string "1": numbers become their text (booleans do not: ambiguous)."""
        if isinstance(value, dict):
            return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
                    for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV_KEYS:
            raise ValueError(f"has {len(value)} keys; at most {MAX_ENV_KEYS} are allowed")
        for key, val in value.items():
            if not ENV_KEY.fullmatch(key):
                raise ValueError(f"key {key!r} must match [A-Z_][A-Z0-9_]*")
            if "\x00" in val or len(val) > 10_000:
                raise ValueError(f"value of {key} must be at most 10000 characters, without NUL")
        return value


class DataItem(_Strict):
    source: Annotated[StrictStr, Field(min_length=1, max_length=2000)]
    target: StrictStr = "./"
    sha256: StrictStr | None = None
    extract: StrictBool = False
    credentials: StrictStr | None = None  # the name of a secret: fsspec storage options (SPEC §2)

    @field_validator("credentials")
    @classmethod
    def _credentials(cls, value: str | None) -> str | None:
        if value is not None and not ENV_KEY.fullmatch(value):
            raise ValueError("must name a secret: [A-Z_][A-Z0-9_]*")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain a NUL character")
        if not value.startswith(SOURCE_SCHEMES):
            raise ValueError("must start with https://, s3://, gs://, upload: or file://")
        if value.startswith("upload:") and not value[len("upload:"):].strip():
            raise ValueError("upload: must name an uploaded file")
        if value.startswith("https://"):
            problem = source_address_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return check_relative_path(value, allow_dot=True)

    @field_validator("sha256")
    @classmethod
    def _sha(cls, value: str | None) -> str | None:
        if value is not None and not SHA256.fullmatch(value.lower()):
            raise ValueError("must be 64 hexadecimal characters")
        return value.lower() if value else value


class ComputeSpec(_Strict):
    gpus: Annotated[StrictInt, Field(ge=1, le=MAX_GPUS_PER_NODE)]
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = 1
    gpu_model: list[Annotated[StrictStr, Field(min_length=1, max_length=64)]] | None = None
    gpu_memory_gb: Annotated[StrictInt | StrictFloat, Field(gt=0, le=10_000)] | None = None
    cpus: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = None
    memory_gb: Annotated[StrictInt | StrictFloat, Field(gt=0, le=1_000_000)] | None = None
    time_limit: StrictInt | StrictStr
    # A gang (nodes > 1) without gpu_model goes on nodes of one GPU model unless this is true (SPEC §5).
    mixed_models: StrictBool = False

    @field_validator("gpu_model", mode="before")
    @classmethod
    def _one_model(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("gpu_model")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must name at least one model, or be left out")
        return value

    @field_validator("gpu_memory_gb", "memory_gb")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("time_limit")
    @classmethod
    def _limit(cls, value: int | str) -> int | str:
        parse_duration(value)
        return value

    @property
    def time_limit_s(self) -> int:
        """The time limit in seconds."""
        return parse_duration(self.time_limit)


class OutputSpec(_Strict):
    paths: list[StrictStr] = Field(default_factory=list, max_length=MAX_OUTPUT_PATHS)
    retention_days: Annotated[StrictInt, Field(ge=1)] | None = None

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            check_relative_path(path)
        return value


class CheckpointSpec(_Strict):
    """``checkpoint``: a directory of the job dir (``path``, relative, not the job dir itself) the
    platform keeps between attempts: packed with the outputs at every end of an attempt, put back
    in place before a later attempt starts (SPEC §2, checkpoints). ``resume_from``: a job of the
    same owner whose newest version the first attempt starts with."""

    path: Annotated[StrictStr, Field(min_length=1, max_length=500)]
    # another job of mine whose newest kept version the first attempt starts with (a rerun that resumes)
    resume_from: Annotated[StrictInt, Field(ge=1)] | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        clean = posixpath.normpath(check_relative_path(value.strip()))
        if clean in (".", ""):
            raise ValueError("must name a directory inside the job dir, not the job dir itself")
        if any(ch in clean for ch in "*?[]"):
            raise ValueError("must be a directory, not a glob")
        return clean


RETRY_ON = ("failed", "timed_out", "node_lost")  # outcomes a retry may cover (SPEC §2 retry)
MAX_RETRY_ATTEMPTS = 10


class RetrySpec(_Strict):
    """``retry``: how many attempts the job may have in all (1: never retried, not even on a node
    loss) and which ended attempts are retried besides a lost node (always retried while attempts
    are left: the platform's fault). A cancel is never retried. After SkyPilot's
    ``max_restarts_on_errors`` and Slurm's ``--requeue``."""

    attempts: Annotated[StrictInt, Field(ge=1, le=MAX_RETRY_ATTEMPTS)]
    on: list[Literal["failed", "timed_out", "node_lost"]] = Field(default_factory=lambda: ["node_lost"],
                                                                    max_length=len(RETRY_ON))

    @field_validator("on")
    @classmethod
    def _on(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names an outcome twice")
        return value


class AfterItem(_Strict):
    """One entry of ``after`` (SPEC §2, issue 25 item 7): the job waits for job ``job`` or for every
    task of array ``array`` (exactly one of the two) to have ``succeeded`` (the default) or to have
    ``ended`` with any outcome. After Slurm's ``--dependency=afterok`` and ``afterany``."""

    job: Annotated[StrictInt, Field(ge=1)] | None = None
    array: Annotated[StrictInt, Field(ge=1)] | None = None
    when: Literal["succeeded", "ended"] = "succeeded"

    @model_validator(mode="after")
    def _one_target(self) -> AfterItem:
        if (self.job is None) == (self.array is None):
            raise ValueError("must name one job (job: ID) or one array (array: ID)")
        return self


class JobSpec(_Strict):
    """A validated spec: name, ``project``, work, data, compute, output, ``retry``, ``checkpoint``,
    ``array`` and ``after`` (SPEC §2, §9)."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=100)]
    project: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None  # SPEC §9; None: personal
    work: WorkSpec
    data: list[DataItem] = Field(default_factory=list, max_length=MAX_DATA)
    compute: ComputeSpec
    output: OutputSpec = Field(default_factory=OutputSpec)
    retry: RetrySpec | None = None  # None: the site's attempts (E31_MAX_ATTEMPTS) on node loss only
    checkpoint: CheckpointSpec | None = None  # a directory kept between attempts
    array: StrictInt | None = None  # N tasks, each a job with E31_ARRAY_INDEX 0..N-1 (apps.jobs.arrays)
    # jobs or arrays this job waits for (apps.jobs.dependencies)
    after: list[AfterItem] = Field(default_factory=list, max_length=MAX_AFTER)
    # The project the submit resolved ``project`` to (apps.jobs.services.submit.spec_validate), and its
    # id; not fields.
    _project: Any = PrivateAttr(default=None)
    _project_id: int | None = PrivateAttr(default=None)

    @field_validator("after")
    @classmethod
    def _after(cls, value: list[AfterItem]) -> list[AfterItem]:
        seen: set[tuple[str, int]] = set()
        for item in value:
            key = ("job", item.job) if item.job is not None else ("array", item.array or 0)
            if key in seen:
                raise ValueError(f"names {key[0]} {key[1]} twice")
            seen.add(key)
        return value

    @field_validator("array")
    @classmethod
    def _array(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= MAX_ARRAY:
            raise ValueError(f"must be a number of tasks from 1 to {MAX_ARRAY:,}")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip() or "\x00" in value:
            raise ValueError("must not be blank")
        return value.strip()


def spec_document(spec: JobSpec, *, exclude: set[str] | None = None) -> dict[str, Any]:
    """The stored (JSON) form of a validated spec: ``work.secrets``, ``data[i].credentials``,
    ``compute.mixed_models``, ``project`` and ``after`` are left out when unused, so a spec that names none reads
    as it did before they existed; an ``after`` entry keeps ``job`` or ``array``, the one it names."""
    document = spec.model_dump(mode="json", exclude=exclude)
    if not document.get("after"):
        document.pop("after", None)
    if document.get("project") is None:
        document.pop("project", None)
    for item in document.get("after") or []:
        for key in ("job", "array"):
            if item.get(key) is None:
                item.pop(key, None)
    for optional in ("retry", "checkpoint"):
        if optional in document and document[optional] is None:
            document.pop(optional)
    if document.get("checkpoint") and document["checkpoint"].get("resume_from") is None:
        document["checkpoint"].pop("resume_from", None)
    if not document["work"].get("secrets"):
        document["work"].pop("secrets", None)
    if document["work"].get("image_credentials") is None:
        document["work"].pop("image_credentials", None)
    if not document["compute"].get("mixed_models"):
        document["compute"].pop("mixed_models", None)
    for item in document.get("data") or []:
        if item.get("credentials") is None:
            item.pop("credentials", None)
    return document


def _field_path(loc: tuple[Any, ...]) -> str:
    """``('data', 0, 'source')`` -> ``data[0].source``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "int", "float", "list[str]", "function-after[_one_model(), list[...]]"):
            continue  # pydantic's union branch names; not fields of ours
        else:
            out += ("." if out else "") + str(part)
    return out or "spec"


_MESSAGES = {
    "missing": "This field is required.",
    "extra_forbidden": "Unknown field.",
    "string_type": "Must be a string.",
    "int_type": "Must be an integer.",
    "bool_type": "Must be true or false.",
    "dict_type": "Must be a mapping of names to values.",
    "list_type": "Must be a list.",
    "model_type": "Must be a mapping.",
    "model_attributes_type": "Must be a mapping.",
}


def _nul_paths(value: Any, path: tuple = ()) -> list[str]:
    """Field paths of every string (key or value) holding a NUL character."""
    if isinstance(value, str):
        return [_field_path(path)] if "\x00" in value else []
    if isinstance(value, Mapping):
        found = []
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                found.append(_field_path(path))
            found += _nul_paths(item, (*path, key))
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nul_paths(item, (*path, i))]
    return []


def parse_spec(document: Any, *, time_limit_max_s: int | None = None,
               retention_days_max: int | None = None) -> JobSpec:
    """Validate a decoded spec document.

    Args:
        document: the spec as decoded from JSON, YAML or the form.
        time_limit_max_s: the operator's maximum time limit, in seconds.
        retention_days_max: the operator's maximum output retention, in days.

    Raises:
        SpecError: with every field error found, keyed by field path.
    """
    if not isinstance(document, Mapping):
        raise SpecError({"spec": ["Must be a mapping with name, work, data, compute and output."]})
    try:
        nul = _nul_paths(document)
    except RecursionError:
        raise SpecError({"spec": ["Is nested too deeply."]}) from None
    if nul:
        raise SpecError({path: ["Must not contain a NUL character."] for path in nul})
    try:
        spec = JobSpec.model_validate(dict(document))
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            path = _field_path(tuple(err["loc"]))
            msg = _MESSAGES.get(err["type"]) or err["msg"].removeprefix("Value error, ")
            msg = re.sub(r"^(Input|String|List|Dictionary|Value) should ", "Must ", msg)
            msg = msg[0].upper() + msg[1:] if msg else msg
            if not msg.endswith("."):
                msg += "."
            bucket = errors.setdefault(path, [])
            if msg not in bucket:
                bucket.append(msg)
        raise SpecError(errors) from None
    errors = {}
    if time_limit_max_s and spec.compute.time_limit_s > time_limit_max_s:
        errors["compute.time_limit"] = [
            f"Is {format_duration(spec.compute.time_limit_s)}; the most this site allows is "
            f"{format_duration(time_limit_max_s)}."
        ]
    days = spec.output.retention_days
    if retention_days_max and days is not None and days > retention_days_max:
        errors["output.retention_days"] = [f"Is {days}; the most this site keeps outputs is {retention_days_max} days."]
    errors.update(_target_clashes(spec.data))
    errors.update(_secret_name_errors(spec.work))
    if spec.work.image_credentials and not spec.work.image:
        errors["work.image_credentials"] = ["Credentials apply to an image: set work.image too."]
    for index, item in enumerate(spec.data):
        if item.credentials and not item.source.startswith(CREDENTIAL_SCHEMES):
            errors[f"data[{index}].credentials"] = ["Credentials apply to s3:// and gs:// sources only."]
    if errors:
        raise SpecError(errors)
    return spec


def _secret_name_errors(work: WorkSpec) -> dict[str, list[str]]:
    """Errors of ``work.secrets``: a malformed name, a name twice, or a name ``work.env`` sets too."""
    errors: dict[str, list[str]] = {}
    seen: set[str] = set()
    for index, name in enumerate(work.secrets):
        if not ENV_KEY.fullmatch(name) or len(name) > 100:
            errors[f"work.secrets[{index}]"] = ["Must name a secret: [A-Z_][A-Z0-9_]*, at most 100 characters."]
        elif name in seen:
            errors[f"work.secrets[{index}]"] = [f"Names {name} twice."]
        elif name in work.env:
            errors[f"work.secrets[{index}]"] = [f"{name} is also set in work.env; set it in one place."]
        seen.add(name)
    return errors


def _target_clashes(items: list[DataItem]) -> dict[str, list[str]]:
    """Errors for data targets that cannot all be written: the same file twice, or a file
    where another item needs a directory (``a`` and ``a/b``). A target ending in ``/`` (or
    ``./``) is a directory the source goes into under its own name; directories may be shared.
    """
    errors: dict[str, list[str]] = {}
    seen: list[tuple[str, bool, int]] = []  # (normalised path, is a file, index)
    for index, item in enumerate(items):
        is_file = not item.target.endswith("/") and item.target not in (".", "")
        path = posixpath.normpath(item.target)
        for other, other_is_file, other_index in seen:
            clash = (is_file and other_is_file and path == other) \
                or (other_is_file and path.startswith(other + "/")) \
                or (is_file and other.startswith(path + "/")) \
                or (is_file != other_is_file and path == other and path != ".")
            if clash:
                errors[f"data[{index}].target"] = [f"Clashes with data[{other_index}].target ({other!r}): "
                                                   "both cannot be written."]
                break
        seen.append((path, is_file, index))
    return errors


class _SpecLoader(yaml.SafeLoader):
    """YAML for specs: duplicate keys are errors, ``1:30`` and ``2024-01-01`` stay strings,
    and aliases (``*name``) are refused.

    PyYAML follows YAML 1.1, where ``1:30`` is the base-60 number 90 and a
    bare date becomes a date object; neither is what someone writing a spec means.
    Aliases are refused because a few lines of them expand into billions of
    nodes ("billion laughs") or into a structure that contains itself.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a job spec; write the value out",
                event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if not tag.endswith((":int", ":float", ":timestamp"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.1 numbers without the base-60 forms (PyYAML's own patterns, that part removed).
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """Decode YAML text safely.

    Raises:
        SpecError: the text is not valid YAML (the error names the line).
    """
    if len(text) > 1_000_000:
        raise SpecError({"spec": ["Is larger than 1 MB."]})
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise SpecError({"spec": ["Is nested too deeply."]}) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "could not be read"
        raise SpecError({"spec": [f"Is not valid YAML{where}: {problem}."]}) from None


def spec_to_yaml(spec: Mapping[str, Any]) -> str:
    """Dump a spec mapping as block YAML in the field order of SPEC §2."""
    return yaml.safe_dump(dict(spec), sort_keys=False, default_flow_style=False, allow_unicode=True)


def compute_request(compute: Mapping[str, Any]) -> ComputeRequest:
    """The typed request of a validated spec's ``compute`` part (its JSON form, ``spec["compute"]``):
    GB converted to MiB once here (:func:`apps.core.units.gb_to_mib`)."""
    return ComputeRequest(
        gpus=compute["gpus"], nodes=compute.get("nodes") or 1, gpu_models=tuple(compute.get("gpu_model") or ()),
        gpu_memory_mib=gb_to_mib(compute.get("gpu_memory_gb")), cpus=compute.get("cpus") or 0,
        memory_mib=gb_to_mib(compute.get("memory_gb")), time_limit_s=parse_duration(compute["time_limit"]))


def requirement_columns(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The typed requirement columns of :class:`apps.jobs.models.Job` for a validated spec (JSON form):
    ``{"gpu_models", "gpu_memory_mib", "cpus", "memory_mib", "needs_runtime", "mixed_models"}``.
    The scheduler reads these, never the spec."""
    request = compute_request(spec["compute"])
    return {"gpu_models": list(request.gpu_models), "gpu_memory_mib": request.gpu_memory_mib,
            "cpus": request.cpus, "memory_mib": request.memory_mib,
            "needs_runtime": bool((spec.get("work") or {}).get("image")),
            "mixed_models": bool(spec["compute"].get("mixed_models"))}
