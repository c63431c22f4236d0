"""Which rate is in force for a GPU model at a time."""
from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings

from .models import GpuRate

# Defaults for a fresh site come from migration metering/0002_default_rates.
FALLBACK_RATE = Decimal(str(getattr(settings, "E31_FALLBACK_RATE", "1.00")))


def rate_at(gpu_model: str, at: datetime) -> Decimal:
    """Rate per GPU-hour of ``gpu_model`` in force at ``at``.

    Looks for the model's newest rate with ``valid_from <= at``; a model
    without any uses the fallback rate (1.00), so no lease is ever free by
    accident of a missing row.
    """
    row = (GpuRate.objects.filter(gpu_model__iexact=gpu_model, valid_from__lte=at)
           .order_by("-valid_from").values_list("rate_per_gpu_hour", flat=True).first())
    return row if row is not None else FALLBACK_RATE


def current_rates(at: datetime) -> dict[str, Decimal]:
    """Every model's rate in force at ``at``, by model name."""
    out: dict[str, Decimal] = {}
    for rate in GpuRate.objects.filter(valid_from__lte=at).order_by("gpu_model", "-valid_from"):
        out.setdefault(rate.gpu_model, rate.rate_per_gpu_hour)
    return out
