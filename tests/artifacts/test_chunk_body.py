"""Bundle chunks reach the view from memory, not through a temporary file (e31site/asgibody.py)."""
import io
import tempfile

from asgiref.sync import async_to_sync

from e31site.asgibody import IN_MEMORY, BodyInMemoryASGIHandler, _InMemoryReceive


def _receiver(parts: list[bytes]):
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]

    async def receive():
        return messages.pop(0)

    return receive


def test_a_chunk_body_is_joined_in_memory():
    parts = [b"a" * 65536, b"b" * 65536, b"c" * (1 << 20)]  # past FILE_UPLOAD_MAX_MEMORY_SIZE (1 MiB)
    body = async_to_sync(BodyInMemoryASGIHandler().read_body)(_InMemoryReceive(_receiver(parts)))
    assert isinstance(body, io.BytesIO) and body.read() == b"".join(parts)


def test_other_bodies_are_spooled_as_django_does():
    body = async_to_sync(BodyInMemoryASGIHandler().read_body)(_receiver([b"x" * (2 << 20)]))
    assert isinstance(body, tempfile.SpooledTemporaryFile) and body._rolled  # on disk past 1 MiB


def test_only_the_bundle_chunk_path_is_read_into_memory():
    assert IN_MEMORY.match("/api/v1/agent/jobs/12/bundle/")
    assert not IN_MEMORY.match("/api/v1/agent/jobs/12/bundle/complete/")
    assert not IN_MEMORY.match("/api/v1/uploads/")
