"""Range requests on stored files (RFC 9110 §14)."""
from apps.artifacts.http import UNSATISFIABLE, byte_range


def test_it_reads_single_ranges():
    assert byte_range("bytes=0-9", 100) == (0, 9)
    assert byte_range("bytes=90-", 100) == (90, 99)
    assert byte_range("bytes=95-200", 100) == (95, 99)
    assert byte_range("bytes=-10", 100) == (90, 99)


def test_it_ignores_invalid_or_multiple_ranges():
    assert byte_range("", 100) is None
    assert byte_range("bytes=5-3", 100) is None
    assert byte_range("bytes=0-1,5-6", 100) is None
    assert byte_range("items=0-1", 100) is None


def test_it_knows_an_unsatisfiable_range():
    assert byte_range("bytes=100-", 100) == UNSATISFIABLE
    assert byte_range("bytes=-0", 100) == UNSATISFIABLE


def test_a_number_of_thousands_of_digits_is_past_any_file_not_a_500():
    huge = "9" * 5000  # int() refuses over 4,300 digits (CPython's int_max_str_digits)
    assert byte_range(f"bytes={huge}-", 100) == UNSATISFIABLE
    assert byte_range(f"bytes=10-{huge}", 100) == (10, 99)
    assert byte_range(f"bytes=-{huge}", 100) == (0, 99)
    assert byte_range(f"bytes={huge}-1", 100) is None


def test_a_plain_tar_bundle_is_named_and_typed_as_one():
    from apps.artifacts.http import archive_label

    assert archive_label("bundles/1/1/0/bundle.tar", "job-1-bundle.tar.gz", "application/gzip") == (
        "job-1-bundle.tar", "application/x-tar")
    assert archive_label("bundles/1/1/0/bundle.tar.gz", "job-1-bundle.tar.gz", "application/gzip") == (
        "job-1-bundle.tar.gz", "application/gzip")  # an older agent's
    assert archive_label("uploads/1/abc", "", "application/octet-stream") == ("", "application/octet-stream")
