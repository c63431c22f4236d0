"""Template tags of the meter. None price anything: a page's view passes the receipt
(:func:`apps.metering.receipts.job_receipt`, a selector) in its context (issue 13: no pricing in templates)."""
from __future__ import annotations

from django import template

register = template.Library()
