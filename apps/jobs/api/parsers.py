"""Request parsers: a spec can be posted as YAML (``Content-Type: application/yaml``)."""
from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

from ..spec import load_yaml


class YAMLParser(BaseParser):
    """Decode ``application/yaml`` (also ``text/yaml``, ``application/x-yaml``) bodies safely."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(1_000_001)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            from ..spec import SpecError

            raise SpecError({"spec": ["Is not UTF-8 text."]}) from None
        return load_yaml(text)


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, answering 400 (not 500) to documents nested too deeply."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
