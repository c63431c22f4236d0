"""Request parsers: a spec can be posted as YAML (``Content-Type: application/yaml``)."""
from __future__ import annotations

import codecs
import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

from ..spec import SpecError, load_yaml


class YAMLParser(BaseParser):
    """Decode ``application/yaml`` (also ``text/yaml``, ``application/x-yaml``) bodies safely."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(1_000_001)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError({"spec": ["Is not UTF-8 text."]}) from None
        return load_yaml(text)


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a key that appears twice in one object (JSON allows it;
    ``{"gpus": 1, "gpus": 8}`` would silently mean 8, and YAML specs already refuse it)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, answering 400 (not 500) to documents nested too deeply and
    400 naming the key to an object with a duplicate key."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.load(codecs.getreader(encoding)(stream), object_pairs_hook=_unique_keys,
                             parse_constant=self._refuse_constant)
        except _DuplicateKey as exc:
            raise SpecError({"spec": [f"duplicate key {exc.key!r}: each key may appear once in an object."]}) \
                from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None

    @staticmethod
    def _refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")
