"""URL path converters.

``<id:...>``: a database id, 1 to 18 digits. Django's ``<int:...>`` takes any
number of digits, so ``/api/v1/agent/jobs/10**30/report/`` reached the query
and PostgreSQL's bigint overflowed (a 500); past 18 digits the URL now simply
does not match (404). 10**18 - 1 < 2**63 - 1, the largest bigint.

``<filepath:...>``: a file's path in a bundle, any characters (``/`` included). Django's
``<path:...>`` is ``.+``, which stops at a newline: reversing the URL of a file named
``a\nb`` raised NoReverseMatch and the file list and the job page answered 500 (issue 26).
"""
from __future__ import annotations

from django.urls import register_converter


class IdConverter:
    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class FilePathConverter:
    regex = r"[\s\S]+"  # any character, CR and LF too (and a pattern OpenAPI tools read)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(IdConverter, "id")
register_converter(FilePathConverter, "filepath")
