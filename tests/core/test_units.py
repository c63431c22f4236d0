"""Units shared by the layers: GB (10**9 bytes) at the edges, MiB inside (issue 13, part 3)."""
import pytest

from apps.core.types import ComputeRequest
from apps.core.units import bytes_to_mib, format_duration, gb_to_mib, mib_to_gb, parse_duration


@pytest.mark.parametrize(("gb", "mib"), [(None, 0), (0, 0), (1, 954), (16, 15259), (80, 76294), (0.5, 477)])
def test_gb_to_mib_rounds_up_so_a_minimum_is_never_understated(gb, mib):
    assert gb_to_mib(gb) == mib
    if gb:
        assert mib * 2**20 >= gb * 10**9 > (mib - 1) * 2**20


@pytest.mark.parametrize("gb", [1, 16, 64, 80, 0.5, 1.5, 1000])
def test_mib_to_gb_gives_back_the_gb_asked_for(gb):
    assert mib_to_gb(gb_to_mib(gb)) == gb


def test_a_node_s_bytes_round_down_and_an_nvml_mib_figure_compares_with_a_request():
    assert bytes_to_mib(2**30 + 5) == 1024
    assert gb_to_mib(80) <= 81559  # an H100's NVML total (MiB) holds an 80 GB request
    assert gb_to_mib(86) > 81559  # and 86 GB does not (85.5 GB is the card)


def test_durations_and_the_typed_request():
    assert parse_duration("1h30m") == 5400 and format_duration(5400) == "1h30m"
    assert ComputeRequest(gpus=2, nodes=3).gpus_total == 6
