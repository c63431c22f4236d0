"""URL path converters.

``<id:...>``: a database id, 1 to 18 digits. Django's ``<int:...>`` takes any
number of digits, so ``/api/v1/agent/jobs/10**30/report/`` reached the query
and PostgreSQL's bigint overflowed (a 500); past 18 digits the URL now simply
does not match (404). 10**18 - 1 < 2**63 - 1, the largest bigint.
"""
from __future__ import annotations

from django.urls import register_converter


class IdConverter:
    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")
