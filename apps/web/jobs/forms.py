"""The browser's new-job form (SPEC §2, §7).

The form has the spec's four parts (work, data, compute, output) and a YAML
box (pasted text or a ``.yaml`` file) that takes precedence when filled.
Either way it builds one spec document, a dict, and hands it to
:func:`apps.jobs.services.job_submit`: the spec validator is the one judge of
what is valid. This module only turns typed text into the document's shape
and puts the validator's errors (``{"compute.gpus": [...]}``) back next to
the inputs they belong to.
"""
from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from e31_protocol.redact import redact_value

from apps.artifacts.models import Upload
from apps.artifacts.services import uploads_from_files
from apps.core.choices import JobKind
from apps.jobs.arrays import ArraySubmitted, spec_submit
from apps.jobs.examples import example_attachments, example_names, example_yaml
from apps.jobs.models import Job
from apps.jobs.rerun import rerun_document, uploads_missing
from apps.jobs.spec import SpecError, load_yaml, spec_to_yaml
from apps.projects.services import submit_choices
from apps.secrets.services import secret_list

DATA_ROWS = 3
DATA_ROWS_MAX = 100
YAML_FILE_MAX_BYTES = 1_000_000
DEFAULT_COMPUTE = {"gpus": 1, "nodes": 1, "time_limit": "1h"}


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Any number of files from one ``<input type=file multiple>``; cleans to a list."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data if item]
        return [single(data, initial)] if data else []


def _text(**attrs: Any) -> forms.TextInput:
    return forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false", **attrs})


def _number(**attrs: Any) -> forms.NumberInput:
    return forms.NumberInput(attrs={"inputmode": "numeric", **attrs})


def _code(rows: int, placeholder: str = "") -> forms.Textarea:
    return forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "code",
                                 "placeholder": placeholder})


class DataRowForm(forms.Form):
    """One input of the job: a URL or a file, where it goes, and how."""

    source = forms.CharField(required=False, label="Source URL",
                             widget=_text(placeholder="https://host/data.tar.gz"))
    file = forms.FileField(required=False, label="or a file")
    target = forms.CharField(required=False, label="Target in the job dir",
                             widget=_text(placeholder="data/"))
    extract = forms.BooleanField(required=False, label="Extract (.tar, .tar.gz, .zip)")
    sha256 = forms.CharField(required=False, label="sha256 (optional)",
                             widget=_text(placeholder="64 hex digits"))
    credentials = forms.CharField(required=False, label="Credentials (a secret's name)",
                                  widget=_text(placeholder="MY_BUCKET", list="secret-names"),
                                  help_text="s3:// or gs://: read with the storage options this secret holds.")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("source") and data.get("file"):
            if data["source"].startswith("upload:"):
                # The source names a file kept from the last try (see JobForm.keep_files):
                # a file chosen again in the row replaces it.
                data["source"] = ""
            else:
                self.add_error("source", "Give a URL or a file, not both.")
        return data

    @property
    def is_blank(self) -> bool:
        data = getattr(self, "cleaned_data", {})
        return not any(data.get(key) for key in ("source", "file", "target", "sha256", "credentials"))


DataRowFormSet = forms.formset_factory(DataRowForm, extra=DATA_ROWS, max_num=DATA_ROWS_MAX,
                                       validate_max=True)


# Where each spec field is typed in the form; ``data[i].x`` goes to row i.
FIELD_OF_PATH = {
    "name": "name", "project": "project",
    "work.command": "command", "work.kind": "kind", "work.env": "env", "work.image": "image",
    "work.secrets": "secrets", "work.image_credentials": "image_credentials",
    "compute.gpus": "gpus", "compute.nodes": "nodes", "compute.gpu_model": "gpu_model",
    "compute.gpu_memory_gb": "gpu_memory_gb", "compute.cpus": "cpus",
    "compute.memory_gb": "memory_gb", "compute.mixed_models": "mixed_models",
    "compute.time_limit": "time_limit",
    "output.paths": "paths", "output.retention_days": "retention_days",
    "files": "files", "spec": "spec_text", "array": "array",
    "retry": "retry_attempts", "retry.attempts": "retry_attempts", "retry.on": "retry_on",
}
ROW_PATH = re.compile(r"^data\[(\d+)\](?:\.(\w+))?")
INDEX = re.compile(r"\[\d+\]")
SECTIONS = ("work", "data", "compute", "output")


@dataclass(frozen=True)
class ErrorLine:
    """One line of the error summary at the top of the form."""

    where: str
    message: str
    anchor: str


class JobForm(forms.Form):
    """The four parts of a spec, or a YAML spec; see the module docstring."""

    # --- YAML (takes precedence when filled) ---
    spec_text = forms.CharField(required=False, strip=False, label="Spec as YAML", widget=_code(16))
    spec_file = forms.FileField(
        required=False, label="or a .yaml file", help_text="Its text replaces the box above.",
        widget=forms.ClearableFileInput(attrs={"accept": ".yaml,.yml,.json"}))
    example = forms.CharField(required=False, widget=forms.HiddenInput)
    # --- work ---
    name = forms.CharField(required=False, label="Name",
                           widget=_text(placeholder="resnet50-finetune"))
    command = forms.CharField(required=False, label="Command",
                              widget=_code(2, "python train.py --epochs 3"),
                              help_text="Run by /bin/sh in the job directory.")
    kind = forms.ChoiceField(choices=JobKind.choices, initial=JobKind.OTHER, label="Kind")
    project = forms.ChoiceField(required=False, label="Project", help_text=(
        "Who it belongs to: its members see it, its budget pays for it (SPEC §9)."))
    env = forms.CharField(required=False, label="Environment", strip=False,
                          widget=_code(3, "SEED=1"), help_text="One KEY=VALUE per line.")
    secrets = forms.MultipleChoiceField(
        required=False, label="Secrets", widget=forms.CheckboxSelectMultiple,
        help_text="Each one you pick is in the job's environment under its name; its value is never shown "
                  "(in the log it reads [secret NAME]). Set them under Settings, Secrets.")
    image = forms.CharField(required=False, label="Container image (optional)",
                            widget=_text(placeholder="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"),
                            help_text="Only nodes with a container runtime take such a job.")
    image_credentials = forms.CharField(
        required=False, label="Registry login (a secret's name)",
        widget=_text(placeholder="REGISTRY", list="secret-names"),
        help_text='A private image: the secret holds {"username": ..., "password": ...} for its registry.')
    # --- data: rows live in ``self.rows``; any number of files here ---
    files = MultipleFileField(required=False, label="Files",
                              help_text="Any number of files; name them as upload:<file name> "
                                        "in a row's source URL or in the YAML spec.")
    # --- compute ---
    gpus = forms.CharField(required=False, label="GPUs per node", initial="1",
                           widget=_number(min=1))
    nodes = forms.CharField(required=False, label="Nodes", initial="1", widget=_number(min=1),
                            help_text="More than one: all nodes or none.")
    gpu_model = forms.CharField(required=False, label="GPU models (any of)",
                                widget=_text(placeholder="H100, A100-80GB"),
                                help_text="Comma separated; H100 matches H100-80GB.")
    gpu_memory_gb = forms.CharField(required=False, label="GPU memory, GB (min)",
                                    widget=_number(min=0, step="any", inputmode="decimal"))
    cpus = forms.CharField(required=False, label="CPUs per node", widget=_number(min=1))
    memory_gb = forms.CharField(required=False, label="Memory per node, GB",
                                widget=_number(min=0, step="any", inputmode="decimal"))
    mixed_models = forms.BooleanField(
        required=False, label="Let a multi-node job mix GPU models",
        help_text="Without GPU models named, the nodes of a multi-node job all have one GPU model "
                  "unless this is ticked.")
    time_limit = forms.CharField(required=False, label="Time limit", initial="1h",
                                 widget=_text(placeholder="8h, 45m, 1h30m, 2d or seconds"),
                                 help_text="90s, 45m, 8h, 1h30m, 2d or seconds. The run is stopped "
                                           "there; billing never goes past it.")
    array = forms.CharField(required=False, label="Tasks (job array, optional)", widget=_number(min=1, max=10000),
                            help_text="N from 1 to 10,000 submits N jobs of this spec at once; each one's "
                                      "command sees E31_ARRAY_INDEX (0 to N-1) and E31_ARRAY_SIZE. "
                                      "Leave empty for one job.")
    retry_attempts = forms.CharField(
        required=False, label="Attempts (retries, optional)", widget=_number(min=1, max=10),
        help_text="In all, 1 to 10. A lost node is retried while attempts are left; leave empty for the "
                  "site's default.")
    retry_on = forms.MultipleChoiceField(
        required=False, label="Also retry an attempt that", widget=forms.CheckboxSelectMultiple,
        choices=[("failed", "failed (exit code not 0)"), ("timed_out", "reached its time limit")],
        help_text="Each attempt is billed; a cancel is never retried.")
    # --- output ---
    paths = forms.CharField(required=False, label="Output paths", strip=False,
                            widget=_code(3, "checkpoints/**\nmetrics.json"),
                            help_text="Globs relative to the job directory, one per line or comma "
                                      "separated. They come back as one bundle.")
    retention_days = forms.CharField(required=False, label="Keep outputs for (days)",
                                     widget=_number(min=1),
                                     help_text="Leave empty for the site's default.")

    def __init__(self, data: Any = None, files: Any = None, *, owner: Any, **kwargs: Any):
        if data is not None:
            # A copy the form may write to: after an error, what the user gave that the page
            # cannot send back itself (a file) is put where the next try reads it.
            data = data.copy()
        if files and files.get("spec_file") is not None and data is not None:
            # The file's text goes into the YAML box, so after an error the
            # user fixes it there instead of choosing the file again.
            data["spec_text"] = _read_text(files["spec_file"])
        super().__init__(data, files, **kwargs)
        self.owner = owner
        # pick by name: the owner's own secrets only (issue 23); values are never read here
        self.secret_names = [s.name for s in secret_list(owner=owner)]
        self.fields["secrets"].choices = [(name, name) for name in self.secret_names]
        self.fields["project"].choices = submit_choices(owner)
        if len(self.fields["project"].choices) <= 1:  # only the personal one: nothing to pick
            self.fields["project"].widget = forms.HiddenInput()
        self.rows = DataRowFormSet(data, files, prefix="data")
        self.kept: list[Upload] = []  # files already stored, offered again after an error
        self.section_errors: dict[str, list[str]] = {}
        self.summary: list[ErrorLine] = []
        self.document: Any = None
        self._row_of_item: dict[int, int] = {}  # index in the document's data -> form row
        self._stored = False  # this try's files went to uploads (or were refused)
        if self.is_bound:
            self.kept = _kept_uploads(owner, self.data.getlist("kept"))

    # --- reading the input -------------------------------------------------
    @property
    def uses_yaml(self) -> bool:
        """True when the YAML box (or file) is filled: it then replaces the four parts."""
        return bool((self.data.get("spec_text") or "").strip()) if self.is_bound else False

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["env"].splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number}: write KEY=VALUE.")
            env[key.strip()] = value
        return env

    def clean_example(self) -> str:
        name = self.cleaned_data["example"].strip()
        if name and name not in example_names():
            raise forms.ValidationError(f"There is no example named {name!r}.")
        return name

    def is_valid(self) -> bool:
        """Shape only (KEY=VALUE lines, a URL or a file per row); the spec is checked on submit."""
        valid = super().is_valid()
        if self.uses_yaml:
            # The four parts are not used: their shape errors do not block a YAML submit.
            return not self.errors.get("spec_text") and not self.errors.get("files") \
                and not self.errors.get("example")
        return valid and self.rows.is_valid()

    # --- building the spec document --------------------------------------
    def build_document(self) -> Any:
        """The spec document from the YAML box, or from the four parts.

        Raises:
            SpecError: the YAML text is not valid YAML.
        """
        if self.uses_yaml:
            self.document = load_yaml(self.data["spec_text"])
            return self.document
        cd = self.cleaned_data
        work: dict[str, Any] = {"command": cd["command"], "kind": cd["kind"]}
        if cd["env"]:
            work["env"] = cd["env"]
        if cd["image"].strip():
            work["image"] = cd["image"].strip()
        if cd["image_credentials"].strip():
            work["image_credentials"] = cd["image_credentials"].strip()
        if cd.get("secrets"):
            work["secrets"] = list(cd["secrets"])
        data = []
        self._row_of_item = {}
        for index, row in enumerate(self.rows.forms):
            if row.is_blank:
                continue
            rd = row.cleaned_data
            upload = rd.get("file")
            item: dict[str, Any] = {"source": f"upload:{upload.name}" if upload else rd["source"]}
            target = rd["target"] or (upload.name if upload else "")
            if target:
                item["target"] = target
            if rd["sha256"]:
                item["sha256"] = rd["sha256"]
            if rd["extract"]:
                item["extract"] = True
            if rd["credentials"].strip():
                item["credentials"] = rd["credentials"].strip()
            self._row_of_item[len(data)] = index
            data.append(item)
        compute: dict[str, Any] = {}
        for key in ("gpus", "nodes", "gpu_memory_gb", "cpus", "memory_gb"):
            if cd[key].strip():
                compute[key] = _number_or_text(cd[key])
        models = _split(cd["gpu_model"])
        if models:
            compute["gpu_model"] = models
        if cd["mixed_models"]:
            compute["mixed_models"] = True
        if cd["time_limit"].strip():
            compute["time_limit"] = _number_or_text(cd["time_limit"])
        output: dict[str, Any] = {"paths": _split(cd["paths"])}
        if cd["retention_days"].strip():
            output["retention_days"] = _number_or_text(cd["retention_days"])
        self.document = {"name": cd["name"], "work": work, "data": data, "compute": compute,
                         "output": output}
        if cd["project"] and not cd["project"].startswith("~"):
            self.document["project"] = cd["project"]
        if cd["array"].strip():
            self.document["array"] = _number_or_text(cd["array"])
        if cd["retry_attempts"].strip() or cd["retry_on"]:
            self.document["retry"] = {"on": ["node_lost", *cd["retry_on"]]}
            if cd["retry_attempts"].strip():
                self.document["retry"]["attempts"] = _number_or_text(cd["retry_attempts"])
        return self.document

    def attachments(self, document: Any) -> dict[str, Upload]:
        """The files of this submission by name: kept from a previous try, chosen now, and
        the example's own files for any ``upload:<name>`` still missing.

        Raises:
            SpecError: a file is larger than the site accepts.
        """
        new = self._store_files()
        found = {u.name: u for u in self.kept} | new
        example = self.cleaned_data.get("example")
        if example:
            missing = [ref for ref in _upload_refs(document) if ref not in found]
            found |= example_attachments(owner=self.owner, name=example, refs=missing)
        self.kept = list(found.values())
        return found

    def _store_files(self) -> dict[str, Upload]:
        """Store the files chosen in this try (once), by name.

        Raises:
            SpecError: a file is larger than the site accepts.
        """
        if self._stored:
            return {}
        self._stored = True
        files = list(getattr(self, "cleaned_data", {}).get("files") or [])
        if not self.uses_yaml:
            files += self._row_files().values()
        try:
            return uploads_from_files(owner=self.owner, files=files)
        except ValueError as exc:
            raise SpecError({"files": [str(exc)]}) from None

    def _row_files(self) -> dict[int, Any]:
        """The file chosen in each data row that has one and no other problem, by row index."""
        if self.rows.is_bound:
            self.rows.errors  # noqa: B018 -- cleans the rows if the form's own errors skipped them
        return {index: row.cleaned_data["file"] for index, row in enumerate(self.rows.forms)
                if getattr(row, "cleaned_data", {}).get("file")}

    def keep_files(self) -> None:
        """After any error: keep this try's files for the next one.

        The files are stored (if the submit did not get that far) and offered again
        through ``kept``; a data row that had a file gets ``upload:<name>`` as its source
        (and the file's name as its target if it had none), so the next submit finds it
        although a browser never sends a file input back.
        """
        if not self.is_bound:
            return
        try:
            new = self._store_files()
        except SpecError as exc:
            if self.summary:
                self.add_spec_errors(exc.errors)
            else:
                self.add_error("files", exc.errors["files"])
            return
        self.kept = list(({u.name: u for u in self.kept} | new).values())
        if self.uses_yaml:
            return
        for index, upload in self._row_files().items():
            prefix = self.rows.forms[index].prefix
            source = (self.data.get(f"{prefix}-source") or "").strip()
            if source and not source.startswith("upload:"):
                continue  # a URL as well: leave it for the user to choose (the file is kept)
            self.data[f"{prefix}-source"] = f"upload:{upload.name}"
            if not (self.data.get(f"{prefix}-target") or "").strip():
                self.data[f"{prefix}-target"] = upload.name

    def submit(self) -> Job | ArraySubmitted:
        """Build the spec, store the files, submit the job (or the array, with ``array``).

        Raises:
            SpecError: the spec is invalid; call :meth:`add_spec_errors`.
        """
        document = self.build_document()
        attachments = self.attachments(document)
        return spec_submit(owner=self.owner, document=document, attachments=attachments)

    # --- errors ----------------------------------------------------------
    def add_spec_errors(self, errors: Mapping[str, list[str]]) -> None:
        """Put the validator's errors next to the inputs they are about, and in the summary."""
        for path, messages in errors.items():
            for message in messages:
                self._add_spec_error(path, message)

    def _add_spec_error(self, path: str, message: str) -> None:
        if self.uses_yaml and path != "files":
            text = message if path == "spec" else f"{path}: {message}"
            self.add_error("spec_text", text)
            self.summary.append(ErrorLine(path, message, "#id_spec_text"))
            return
        match = ROW_PATH.match(path)
        if match:
            item = int(match.group(1))
            index = self._row_of_item.get(item, item)
            field = match.group(2)
            if index < len(self.rows.forms) and field in DataRowForm.base_fields:
                row = self.rows.forms[index]
                if field == "source" and getattr(row, "cleaned_data", {}).get("file"):
                    field = "file"
                row.add_error(field, message)
                label = f"Data row {index + 1}, {DataRowForm.base_fields[field].label.lower()}"
                self.summary.append(ErrorLine(label, message, f"#id_data-{index}-{field}"))
                return
        field = FIELD_OF_PATH.get(INDEX.sub("", path))
        if field:
            self.add_error(field, message)
            self.summary.append(ErrorLine(str(self.fields[field].label), message, f"#id_{field}"))
            return
        section = path.split(".")[0].split("[")[0]
        section = section if section in SECTIONS else "work"
        text = message if path == section else f"{path}: {message}"
        self.section_errors.setdefault(section, []).append(text)
        self.summary.append(ErrorLine(section.capitalize(), text, f"#part-{section}"))

    @property
    def summary_lines(self) -> list[ErrorLine]:
        """The error summary: the validator's errors, or else the form's own (shape) errors."""
        if self.summary or not self.is_bound:
            return self.summary
        lines = []
        yaml_fields = ("spec_text", "files", "example")
        for name, messages in self.errors.items():
            if name == "__all__" or self.uses_yaml and name not in yaml_fields:
                continue
            label = str(self.fields[name].label or name.capitalize())
            lines += [ErrorLine(label, message, f"#id_{name}") for message in messages]
        if not self.uses_yaml:
            for index, row in enumerate(self.rows.forms):
                for name, messages in row.errors.items():
                    field = DataRowForm.base_fields.get(name)
                    label = f"Data row {index + 1}" + (f", {field.label.lower()}" if field else "")
                    anchor = f"#id_data-{index}-{name}" if field else f"#data-row-{index}"
                    lines += [ErrorLine(label, message, anchor) for message in messages]
        return lines

    # --- for the page ----------------------------------------------------
    def compute_document(self) -> Any:
        """The compute part to estimate a price from: as built, as typed, as in the example,
        or the defaults of an empty form."""
        document = self.document
        if document is None:
            if self.is_bound and not self.uses_yaml:
                keys = ("gpus", "nodes", "time_limit", "gpu_model")
                return {key: self.data.get(key, "") for key in keys}
            text = self.data.get("spec_text") if self.is_bound else self.initial.get("spec_text")
            if text:
                try:
                    document = load_yaml(text)
                except SpecError:
                    return None
            else:
                return DEFAULT_COMPUTE
        return document.get("compute") if isinstance(document, Mapping) else None


def new_job_form(*, owner: Any, example: str | None = None) -> JobForm:
    """An empty form, or one whose YAML box holds the example's ``job.yaml``.

    Raises:
        LookupError: there is no example ``example``.
    """
    initial: dict[str, Any] = {}
    if example:
        text = example_yaml(example)
        if text is None:
            raise LookupError(example)
        initial = {"spec_text": text, "example": example}
    return JobForm(owner=owner, initial=initial)


def edit_job_form(*, owner: Any, job: Job) -> tuple[JobForm, list[str]]:
    """The new-job form prefilled with ``job``'s spec as YAML ("Edit and run"), and warnings.

    Each ``upload:<id>`` input still kept is shown as ``upload:<file name>`` and attached (the
    form's ``kept`` files, sent again with the submit); one no longer kept stays as it was and
    gets a warning naming its target, never the internal id. ``array`` is dropped as for a re-run
    (:func:`apps.jobs.rerun.rerun_document`). The caller has checked that ``owner`` owns ``job``.
    """
    document = rerun_document(job)
    warnings = [msg for msgs in uploads_missing(document, owner=owner).values() for msg in msgs]
    items: dict[str, list[dict[str, Any]]] = {}
    for item in document.get("data") or []:
        source = item.get("source") or ""
        if source.startswith("upload:"):
            items.setdefault(source[len("upload:"):], []).append(item)
    kept = _kept_uploads(owner, list(items))
    names = [u.name for u in kept]
    for upload in kept:
        if names.count(upload.name) == 1:  # two files of one name: keep the ids, both still resolve
            for item in items.get(str(upload.pk), []):
                item["source"] = f"upload:{upload.name}"
    shown = redact_value(document)  # a URL's userinfo and signature are never filled back in (issue 23)
    if shown != document:
        warnings.append("Credentials in a URL are shown as ***: type them again, or better, keep them in a "
                        "secret named by data[i].credentials.")
    form = JobForm(owner=owner, initial={"spec_text": spec_to_yaml(shown)})
    form.kept = kept
    return form, warnings


def _read_text(upload: Any) -> str:
    data = upload.read(YAML_FILE_MAX_BYTES + 1)
    upload.seek(0)
    return data.decode("utf-8", errors="replace")


def _kept_uploads(owner: Any, ids: list[str]) -> list[Upload]:
    """The owner's uploads among ``ids``; anyone else's id (or garbage) is ignored."""
    valid = []
    for value in ids[:DATA_ROWS_MAX]:
        try:
            valid.append(uuid.UUID(value))
        except ValueError:
            continue
    if not valid:
        return []
    return list(Upload.objects.filter(owner=owner, pk__in=valid).order_by("created_at"))


def _upload_refs(document: Any) -> list[str]:
    """Names of ``upload:<name>`` sources in a (not yet validated) document's data part."""
    data = document.get("data") if isinstance(document, Mapping) else None
    refs = []
    for item in data if isinstance(data, list) else []:
        source = item.get("source") if isinstance(item, Mapping) else None
        if isinstance(source, str) and source.startswith("upload:"):
            refs.append(source[len("upload:"):])
    return refs


def _split(text: str) -> list[str]:
    """Items one per line or comma separated, blanks dropped."""
    return [part.strip() for part in re.split(r"[\n,]", text or "") if part.strip()]


def _number_or_text(text: str) -> Any:
    """``"4"`` -> 4, ``"1.5"`` -> 1.5, anything else stays text for the validator to refuse."""
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text
