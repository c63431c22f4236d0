"""Issue 22 item 4: the agent payloads are written twice, as the protocol's ``TypedDict`` shapes
(``e31_protocol.payloads``, what the agent sends and reads) and as the server's DRF serializers
(what it validates and what the OpenAPI document shows). This test checks every serializer
against its shape, field by field: the names, required or not, and the types (a choice field
offers exactly its enum's words, a nullable field is ``X | None``, nested serializers are their
nested shapes), so the two cannot drift.

Required or not may differ only where it is safe and written down below (:data:`LENIENT`): a
request field the agent always sends that the server also takes absent (a default, for older
agents), or an answer field the agent must take absent (older servers) that this server always
sends.
"""
from __future__ import annotations

import enum
import inspect
import types
import typing
from typing import Any, NotRequired, get_args, get_origin, get_type_hints, is_typeddict

from e31_protocol import payloads as p
from rest_framework import serializers

from apps.agent_api.api import prestage
from apps.agent_api.api import serializers as s

# (serializer, shape, direction): "in" the agent sends it, "out" the server answers it.
PAIRS: list[tuple[type[serializers.Serializer], type, str]] = [
    (s.GpuInSerializer, p.GpuInfo, "in"),
    (s.RegisterSerializer, p.RegisterRequest, "in"),
    (s.AttemptRefSerializer, p.AttemptRef, "in"),
    (s.GpuHealthSerializer, p.GpuHealth, "in"),
    (s.HealthSerializer, p.Health, "in"),
    (s.HeartbeatSerializer, p.HeartbeatRequest, "in"),
    (s.ExitedSerializer, p.Exited, "in"),
    (s.ReportSerializer, p.Report, "in"),
    (s.BatchReportSerializer, p.BatchReport, "in"),
    (s.ReportBatchSerializer, p.ReportBatchRequest, "in"),
    (s.ReportBatchRequestSerializer, p.ReportBatchRequest, "in"),
    (s.ManifestFileSerializer, p.ManifestFile, "in"),
    (s.BundleCompleteSerializer, p.BundleCompleteRequest, "in"),
    (s.BundleDirectSerializer, p.BundleDirectRequest, "in"),
    (s.GpuSampleSerializer, p.GpuSample, "in"),
    (s.SampleSerializer, p.Sample, "in"),
    (s.SamplesSerializer, p.SamplesRequest, "in"),
    (prestage.PrestageItemSerializer, p.PrestageProgress, "in"),
    (prestage.PrestageReportSerializer, p.PrestageRequest, "in"),
    (s.ErrorAnswerSerializer, p.ErrorBody, "out"),
    (s.BundleErrorAnswerSerializer, p.BundleErrorBody, "out"),
    (s.RegisterAnswerSerializer, p.RegisterResponse, "out"),
    (s.HeartbeatAnswerSerializer, p.HeartbeatResponse, "out"),
    (s.AssignedGpuSerializer, p.AssignedGpu, "out"),
    (s.AssignmentSerializer, p.Assignment, "out"),
    (s.GangNodeSerializer, p.GangNode, "out"),
    (s.CheckpointPlanSerializer, p.CheckpointPlan, "out"),
    (s.GangNetSerializer, p.GangNet, "out"),
    (s.DataInputSerializer, p.DataInput, "out"),
    (s.InputScopeSerializer, p.InputScope, "out"),
    (s.PrestageOfferSerializer, p.PrestageOffer, "out"),
    (s.WorkAnswerSerializer, p.WorkResponse, "out"),
    (s.ReportAnswerSerializer, p.ReportResponse, "out"),
    (s.ReportResultSerializer, p.ReportResult, "out"),
    (s.ReportBatchAnswerSerializer, p.ReportBatchResponse, "out"),
    (s.LogAnswerSerializer, p.LogResponse, "out"),
    (s.BundleStatusAnswerSerializer, p.BundleStatusResponse, "out"),
    (s.BundleDirectPartSerializer, p.BundleDirectPart, "out"),
    (s.BundleDirectUploadedSerializer, p.BundleDirectUploaded, "out"),
    (s.BundleDirectAnswerSerializer, p.BundleDirectResponse, "out"),
    (s.BundleChunkAnswerSerializer, p.BundleChunkResponse, "out"),
    (s.BundleCompleteAnswerSerializer, p.BundleCompleteResponse, "out"),
    (s.SamplesAnswerSerializer, p.SamplesResponse, "out"),
    (prestage.PrestageAnswerSerializer, p.PrestageResponse, "out"),
]
SHAPE_OF = {serializer: shape for serializer, shape, _ in PAIRS}

# Where required-or-not may differ, and why (each in the safe direction, checked below).
LENIENT: dict[tuple[str, str], str] = {
    ("HealthSerializer", "source"): "taken absent as none (an agent that reads no GPU figures)",
    ("HealthSerializer", "gpus"): "taken absent as no GPU",
    ("HeartbeatSerializer", "running"): "taken absent as nothing running",
    ("PrestageItemSerializer", "bytes_done"): "taken absent as 0",
    ("RegisterAnswerSerializer", "protocol_version"): "sent by v3 servers; an agent takes it absent (v2)",
    ("AssignmentSerializer", "output_max_bytes"): "always sent here; an agent takes it absent (older servers)",
}

# The envelope of ``POST reports/`` takes each report as a plain object and validates it apart
# (one bad report is answered alone): its items are BatchReportSerializer's.
VALIDATED_APART: dict[tuple[str, str], type[serializers.Serializer]] = {
    ("ReportBatchSerializer", "reports"): s.BatchReportSerializer,
}

SCALARS: list[tuple[type[serializers.Field], type]] = [
    (serializers.BooleanField, bool),
    (serializers.IntegerField, int),
    (serializers.FloatField, float),
    (serializers.CharField, str),  # RegexField too
]


def _shape_fields(shape: type) -> dict[str, tuple[Any, bool]]:
    """``{key: (type, required)}`` of a TypedDict, read from its annotations (``NotRequired``)."""
    out = {}
    for key, hint in get_type_hints(shape, include_extras=True).items():
        required = get_origin(hint) is not NotRequired
        out[key] = (hint if required else get_args(hint)[0], required)
    return out


def _nullable(hint: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(hint, False)``."""
    if get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == len(get_args(hint)) - 1 and len(args) == 1:
            return args[0], True
    return hint, False


def _type_problems(field: serializers.Field, hint: Any, where: str) -> list[str]:
    """Why ``field`` does not validate (or describe) values of type ``hint``; empty when it does."""
    hint, nullable = _nullable(hint)
    problems = []
    if getattr(field, "allow_null", False) != nullable:
        problems.append(f"{where}: allow_null={field.allow_null} but the shape says {'' if nullable else 'not '}None")
    if isinstance(field, serializers.ListSerializer):
        if get_origin(hint) is not list:
            return [*problems, f"{where}: a list of {type(field.child).__name__} but the shape says {hint}"]
        (item,) = get_args(hint)
        if SHAPE_OF.get(type(field.child)) is not item:
            problems.append(f"{where}: items are {type(field.child).__name__}, paired with "
                            f"{getattr(SHAPE_OF.get(type(field.child)), '__name__', None)}, but the shape says {item}")
        return problems
    if isinstance(field, serializers.Serializer):
        if SHAPE_OF.get(type(field)) is not hint:
            problems.append(f"{where}: {type(field).__name__} but the shape says {hint}")
        return problems
    if isinstance(field, serializers.ListField):
        if get_origin(hint) is not list:
            return [*problems, f"{where}: a list but the shape says {hint}"]
        return problems + _type_problems(field.child, get_args(hint)[0], f"{where}[]")
    if isinstance(field, serializers.DictField):
        if get_origin(hint) is not dict or get_args(hint)[0] is not str:
            return [*problems, f"{where}: an object but the shape says {hint}"]
        value = get_args(hint)[1]
        if type(field.child).__name__ == "_UnvalidatedField":
            return problems if value is Any else [*problems, f"{where}: any values but the shape says {value}"]
        return problems + _type_problems(field.child, value, f"{where}{{}}")
    if isinstance(field, serializers.ChoiceField):
        if not (inspect.isclass(hint) and issubclass(hint, enum.StrEnum)):
            return [*problems, f"{where}: a choice but the shape says {hint}"]
        if set(field.choices) != {member.value for member in hint}:
            problems.append(f"{where}: choices {sorted(field.choices)} but {hint.__name__} has "
                            f"{sorted(m.value for m in hint)}")
        return problems
    for kind, python in SCALARS:
        if isinstance(field, kind):
            return problems if hint is python else [*problems, f"{where}: {type(field).__name__} but the shape says "
                                                                 f"{hint}"]
    return [*problems, f"{where}: {type(field).__name__} is not checked by this test (teach it)"]


def _pair_problems(serializer: type[serializers.Serializer], shape: type, direction: str) -> list[str]:
    fields = serializer().fields
    expected = _shape_fields(shape)
    name = serializer.__name__
    problems = []
    if set(fields) != set(expected):
        extra, missing = sorted(set(fields) - set(expected)), sorted(set(expected) - set(fields))
        problems.append(f"{name} vs {shape.__name__}: fields only in the serializer {extra}, only in the shape "
                        f"{missing}")
    for key in sorted(set(fields) & set(expected)):
        field, (hint, required) = fields[key], expected[key]
        where = f"{name}.{key} ({shape.__name__})"
        if field.required != required:
            safe = ((direction == "in" and required and field.default is not serializers.empty)  # a default
                    or (direction == "out" and not required))  # always sent, taken absent
            if (name, key) not in LENIENT:
                problems.append(f"{where}: required={field.required} but the shape says "
                                f"{'required' if required else 'NotRequired'}")
            elif not safe:
                problems.append(f"{where}: allowed to differ only the safe way ({LENIENT[name, key]})")
        elif (name, key) in LENIENT:
            problems.append(f"{where}: listed in LENIENT but agrees now: take it off the list")
        if (name, key) in VALIDATED_APART:
            item = VALIDATED_APART[name, key]
            if not (isinstance(field, serializers.ListField) and get_origin(hint) is list
                    and SHAPE_OF.get(item) is get_args(hint)[0]):
                problems.append(f"{where}: its items are validated by {item.__name__}, which must pair with the shape")
            continue
        problems += _type_problems(field, hint, where)
    return problems


def test_every_serializer_matches_its_protocol_shape():
    problems = [problem for serializer, shape, direction in PAIRS
                for problem in _pair_problems(serializer, shape, direction)]
    assert not problems, "\n".join(problems)


def test_every_agent_serializer_and_every_shape_is_paired():
    """A serializer or a shape added on one side alone fails here."""
    defined = {obj for module in (s, prestage) for obj in vars(module).values() if inspect.isclass(obj)
               and issubclass(obj, serializers.Serializer) and obj.__module__ == module.__name__}
    assert defined - set(SHAPE_OF) == set(), "serializers with no protocol shape"
    shapes = {obj for obj in vars(p).values() if is_typeddict(obj) and obj.__module__ == p.__name__}
    assert shapes - set(SHAPE_OF.values()) == set(), "protocol shapes no serializer checks"


def test_a_drifted_field_is_caught():
    """The check itself: a serializer that lost a field, made one required, or offers other words fails."""

    class Drifted(serializers.Serializer):
        exit_code = serializers.IntegerField(min_value=-255, max_value=255)  # lost allow_null
        reason = serializers.ChoiceField(choices=["exit", "oom"])  # other words
        message = serializers.CharField(max_length=10)  # made required
        # elapsed_s lost

    problems = "\n".join(_pair_problems(Drifted, p.Exited, "in"))
    assert "Drifted.exit_code (Exited): allow_null=False but the shape says None" in problems
    assert "Drifted.reason (Exited): choices ['exit', 'oom']" in problems
    assert "Drifted.message (Exited): required=True but the shape says NotRequired" in problems
    assert "only in the shape ['elapsed_s']" in problems


def test_the_protocol_shapes_know_their_optional_keys_at_run_time():
    """``NotRequired`` is seen by Python itself (no string annotations in payloads.py)."""
    assert p.RegisterRequest.__optional_keys__ == {"agent_version", "disk_bytes", "runtimes", "simulated", "sandboxed",
                                                   "data_schemes"}
    assert {"code", "exited"} <= p.BatchReport.__optional_keys__ and "job_id" in p.BatchReport.__required_keys__
