"""Sources that work or are refused (issue 28 item 5): a data source whose scheme no node's agent can
read is a 400 naming ``data[i].source`` at submit, never a billed staging failure; an agent that does
not say what it reads (older) counts as one that can."""
import pytest

from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db

PLAIN = ["https", "upload", "file"]  # an agent without its cloud extra


def test_an_s3_source_no_node_can_read_is_refused_naming_it(api):
    node_with_gpus("node-plain", data_schemes=PLAIN)
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "https://example.com/a.bin"},
                                                {"source": "s3://bucket/b.bin"}]), format="json")
    assert resp.status_code == 400 and list(resp.json()) == ["data[1].source"], resp.json()
    assert "s3fs" in resp.json()["data[1].source"][0]


def test_one_node_that_reads_it_is_enough_and_an_older_agent_counts(api):
    node_with_gpus("node-plain", data_schemes=PLAIN)
    node_with_gpus("node-cloud", data_schemes=[*PLAIN, "s3", "gs"])
    assert api.post("/api/v1/jobs/", spec(data=[{"source": "gs://bucket/c.bin"}]), format="json").status_code == 201
    node_with_gpus("node-old")  # registered before agents said: data_schemes null
    assert api.post("/api/v1/jobs/", spec(data=[{"source": "s3://bucket/b.bin"}]), format="json").status_code == 201
