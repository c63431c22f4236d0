"""Uploads through the API (SPEC §7): an input file, referenced in a spec as ``upload:<id>``."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.artifacts.services import upload_create
from apps.projects.services import ProjectError, submit_project


class UploadView(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(request={"multipart/form-data": {"type": "object", "properties": {
        "file": {"type": "string", "format": "binary"}, "project": {"type": "string"}}}},
        responses={201: OpenApiTypes.OBJECT}, description=(
            "Upload an input file; use `upload:<id>` in a spec. With `project`, it is the project's: "
            "usable by that project's jobs only (SPEC §9)."))
    def post(self, request):
        f = request.FILES.get("file")
        if f is None:
            raise ValidationError({"file": ["This field is required."]})
        project_id = None
        if request.data.get("project"):
            try:
                project_id = submit_project(request.user, str(request.data["project"])).pk
            except ProjectError as e:
                raise ValidationError({"project": [e.message]}) from None
        try:
            upload = upload_create(owner=request.user, name=f.name, fileobj=f, project_id=project_id)
        except ValueError as exc:
            raise ValidationError({"file": [str(exc)]}) from None
        return Response({"id": str(upload.id), "name": upload.name, "size_bytes": upload.size_bytes,
                         "sha256": upload.sha256, "source": upload.source,
                         "project": upload.project.name if upload.project_id else None}, status=201)
