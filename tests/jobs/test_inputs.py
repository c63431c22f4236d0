"""apps.jobs.inputs: the server's side of an input's identity (issue 23 item 1, issue 22 item 4)."""
from __future__ import annotations

import re

from e31_agent.models import PrestageOffer

from apps.jobs.inputs import input_credentials_id, input_scope, owner_scope, spec_input_identities

DATA = [{"source": "upload:6c1f0000-0000-0000-0000-000000000001", "target": "in/"},
        {"source": "s3://bucket/train.bin", "target": ""},
        {"source": "https://alice:pw@data.example.org/w.bin?X-Amz-Signature=abc", "target": "", "sha256": "ab" * 32}]


def test_the_agent_computes_from_the_scope_what_the_server_names(settings):
    """One rule: the identities the cycle gives a job are those its agent keys the cache by."""
    settings.SECRET_KEY = "k" * 50
    credentials = {1: input_credentials_id(value='{"key": "AKIA", "secret": "s"}')}
    scope = input_scope(owner_id=7, data=DATA, credentials=credentials)
    assert scope == {"owner": owner_scope(7), "credentials": [None, credentials[1], None]}
    offer = PrestageOffer.from_json({"job_id": 1, "new": True, "data": DATA, "input_scope": scope})
    assert tuple(d.identity for d in offer.data) == spec_input_identities(owner_id=7, data=DATA,
                                                                         credentials=credentials)
    assert input_scope(owner_id=7, data=DATA) == {"owner": owner_scope(7)}  # all anonymous: no list


def test_scopes_and_credential_ids_are_keyed_hashes_that_differ_per_account_and_key(settings):
    settings.SECRET_KEY = "k" * 50
    alice, bob = owner_scope(1), owner_scope(2)
    assert alice != bob and re.fullmatch(r"ow1-[0-9a-f]{32}", alice)
    cred = input_credentials_id(value="secret-value")
    assert re.fullmatch(r"cr1-[0-9a-f]{32}", cred) and "secret" not in cred
    assert spec_input_identities(owner_id=1, data=DATA[:1]) != spec_input_identities(owner_id=2, data=DATA[:1])
    assert spec_input_identities(owner_id=1, data=DATA[1:2]) == spec_input_identities(owner_id=2, data=DATA[1:2])
    settings.SECRET_KEY = "other" * 10  # a rotated key: the same account, another scope (a cache miss, safe)
    assert owner_scope(1) != alice
