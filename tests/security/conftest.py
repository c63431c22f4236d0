"""Security tests run hostile probe jobs on the live stack of tests/e2e."""

from tests.e2e.conftest import _meter_check_after_the_stack, stack  # noqa: F401
