"""Inventory: --simulate values and NVML model names."""

from pathlib import Path

import pytest
from e31_agent.inventory import (
    SimulateError,
    collect,
    gpu_health,
    normalise_model,
    parse_simulate,
    simulated_gpus,
)


@pytest.mark.parametrize(
    ("name", "memory_mb", "model"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
        ("NVIDIA L40S", 46068, "L40S-48GB"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX4090-24GB"),
        ("Tesla V100-SXM2-16GB", 16160, "V100-16GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("NVIDIA H100 NVL", 95830, "H100-94GB"),
        ("NVIDIA RTX A6000", 49140, "RTXA6000-48GB"),
        ("NVIDIA A100-PCIE-40GB", None, "A100-40GB"),  # no NVML size: the name's
    ],
)
def test_it_normalises_nvml_names(name, memory_mb, model):
    assert normalise_model(name, memory_mb) == model


def test_it_reads_simulate_values():
    assert parse_simulate("4xH100-80GB") == [(4, "H100-80GB", 80)]
    assert parse_simulate("2xA100-40GB,1xL40S-48GB") == [
        (2, "A100-40GB", 40),
        (1, "L40S-48GB", 48),
    ]
    assert parse_simulate("h100-80gb") == [(1, "H100-80GB", 80)]


@pytest.mark.parametrize("value", ["", "4xH100", "0xH100-80GB", "4x-80GB", "4xH100-80GB,,"])
def test_it_refuses_bad_simulate_values(value):
    with pytest.raises(SimulateError):
        parse_simulate(value)


def test_it_fakes_gpus_with_stable_uuids(tmp_path: Path):
    gpus = simulated_gpus("2xA100-40GB,1xL40S-48GB", hostname="h1", workdir=tmp_path)
    assert [(g.index, g.model, g.memory_mb) for g in gpus] == [
        (0, "A100-40GB", 40960),
        (1, "A100-40GB", 40960),
        (2, "L40S-48GB", 49152),
    ]
    assert len({g.uuid for g in gpus}) == 3
    assert all(g.uuid.startswith("GPU-") for g in gpus)
    again = simulated_gpus("2xA100-40GB,1xL40S-48GB", hostname="h1", workdir=tmp_path)
    assert [g.uuid for g in again] == [g.uuid for g in gpus]
    elsewhere = simulated_gpus("2xA100-40GB", hostname="h1", workdir=tmp_path / "other")
    assert elsewhere[0].uuid != gpus[0].uuid


def test_it_collects_the_host(tmp_path: Path):
    inv = collect(workdir=tmp_path, simulate="4xH100-80GB")
    data = inv.to_json()
    assert data["simulated"] is True
    assert len(data["gpus"]) == 4 and data["gpus"][3]["model"] == "H100-80GB"
    assert data["cpus"] >= 1 and data["memory_bytes"] > 0 and data["disk_bytes"] > 0
    assert set(data) == {
        "hostname", "agent_version", "gpus", "cpus", "memory_bytes", "disk_bytes",
        "runtimes", "simulated", "sandboxed", "data_schemes",
    }  # fmt: skip
    assert data["data_schemes"] == ["https", "upload", "file", "s3", "gs"]  # the agent's cloud extra is installed


def test_simulated_gpus_report_healthy_figures_by_uuid(tmp_path):
    inventory = collect(workdir=tmp_path, simulate="2xH100-80GB")
    health = gpu_health(inventory)
    assert health["source"] == "simulated"
    assert [g["uuid"] for g in health["gpus"]] == [g.uuid for g in inventory.gpus]
    assert all(g["temperature_c"] == 35 and g["ecc_uncorrected"] == 0 for g in health["gpus"])


def test_no_gpus_no_health(tmp_path):
    assert gpu_health(None) == {"gpus": [], "source": "none"}
