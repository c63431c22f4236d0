"""A bounded schemathesis run over ``/api/schema/`` (issue 11): about 30 generated requests per
operation, signed in with an API token, against the real application and database; no answer
may be a 5xx. Derandomized, so a failure reproduces."""
import pytest
import schemathesis
import schemathesis.specs.openapi.adapter  # noqa: F401  at collection: see ADAPTER below
from django.core.wsgi import get_wsgi_application
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings

from apps.tokens.services import token_issue

from ..factories import UserFactory, node_with_gpus

EXAMPLES = 30
# ADAPTER: schemathesis loads its OpenAPI adapter lazily; imported (so parsed) at collection, before any thread
# runs, since CPython 3.11's parser keeps one AST recursion counter and a parse racing another thread's failed
# in CI with "SystemError: AST constructor recursion depth mismatch" (cpython#106905).


@pytest.mark.django_db(transaction=True)
def test_no_operation_answers_5xx():
    node_with_gpus("node-a", count=4)
    user = UserFactory(username="fuzz")
    schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    schema.app = get_wsgi_application()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    failures = []
    counts = {}
    statuses: dict[int, int] = {}

    def fuzz(operation) -> None:
        label = f"{operation.method.upper()} {operation.path}"
        counts[label] = 0
        # A key of its own per operation: DELETE /account/tokens/{id}/ may revoke the one in use, which
        # must not turn every later operation into a 401.
        key = token_issue(user=user)

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        def run(case):
            counts[label] += 1
            response = case.call(headers={"Authorization": f"Token {key}"})
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code >= 500:
                failures.append((label, case.formatted_path, case.query, case.body, response.status_code,
                                 response.text[:300]))

        run()

    for operation in operations:
        fuzz(operation)
    assert failures == [], failures
    assert all(n >= 1 for n in counts.values()), counts
    assert sum(n for status, n in statuses.items() if status < 400) >= len(operations), statuses  # signed in
