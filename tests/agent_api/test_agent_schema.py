"""The OpenAPI document lists every agent call, with its request and answer schemas and the
agent protocol's version (docs/agent-protocol.md, "Schema")."""
import json
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from e31_protocol import PROTOCOL_VERSION, ErrorCode, ExitReason, FinishCode, ReportType

pytestmark = pytest.mark.django_db

BINARY = {"/api/v1/agent/uploads/{upload_id}/": "get", "/api/v1/agent/jobs/{job_id}/checkpoint/": "get"}  # bytes


def _agent_routes() -> list[str]:
    """Every routed path under /api/v1/agent/, in the schema's spelling (``{job_id}``)."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                walk(p.url_patterns, route)
            elif isinstance(p, URLPattern) and route.startswith("api/v1/agent/"):
                found.append("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route))

    walk(get_resolver().url_patterns, "")
    return found


@pytest.fixture
def schema(client):
    resp = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert resp.status_code == 200
    return json.loads(resp.content)


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def test_every_agent_call_is_in_the_schema(schema):
    routes = _agent_routes()
    assert len(routes) >= 10  # register, heartbeat, work, report, reports, log, bundle, complete, uploads, prestage
    assert schema["info"]["x-e31-agent-protocol"] == PROTOCOL_VERSION
    assert schema["components"]["securitySchemes"]["nodeToken"]["name"] == "Authorization"
    for path in routes:
        assert path in schema["paths"], f"{path} is not in the OpenAPI document"
        operations = {m: op for m, op in schema["paths"][path].items() if m in ("get", "post", "put")}
        assert operations, path
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            assert op["tags"] == ["agent"], where
            assert f"v{PROTOCOL_VERSION}" in op["description"], where
            assert {"nodeToken": []} in op["security"], where
            ok = op["responses"]["200"]["content"]
            if BINARY.get(path) == method:
                assert "application/octet-stream" in ok, where
                continue
            assert _resolve(schema, ok["application/json"]["schema"])["properties"], where
            if method in ("post", "put"):  # JSON, or the raw bytes of a log or bundle chunk
                assert op.get("requestBody", {}).get("content"), f"{where} has no request schema"


def test_the_report_schema_carries_the_protocol_words(schema):
    report = schema["paths"]["/api/v1/agent/jobs/{job_id}/report/"]["post"]
    body = _resolve(schema, report["requestBody"]["content"]["application/json"]["schema"])
    enums = schema["components"]["schemas"]
    assert set(_resolve(schema, body["properties"]["type"])["enum"]) == {t.value for t in ReportType}
    assert set(_resolve(schema, body["properties"]["reason"])["enum"]) == {r.value for r in ExitReason}
    assert set(_resolve(schema, body["properties"]["code"])["enum"]) == {c.value for c in FinishCode}
    assert set(enums["ErrorCodeEnum"]["enum"]) == {c.value for c in ErrorCode}
    assert "409" in report["responses"]
    work = schema["paths"]["/api/v1/agent/work/"]["get"]
    assert {p["name"] for p in work["parameters"]} >= {"wait", "have"}
    answer = _resolve(schema, work["responses"]["200"]["content"]["application/json"]["schema"])
    assert set(answer["properties"]) == {"assignments", "cancel", "prestage"}
