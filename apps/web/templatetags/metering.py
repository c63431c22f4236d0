"""Template tags of the meter: ``{% receipt_for job as receipt %}`` for the job page's receipt."""
from __future__ import annotations

from django import template

from apps.metering.receipts import Receipt, job_receipt

register = template.Library()


@register.simple_tag
def receipt_for(job) -> Receipt:
    """The job's receipt (:func:`apps.metering.receipts.job_receipt`), priced now."""
    return job_receipt(job)
