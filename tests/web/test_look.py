"""What the pages look like, as far as markup can tell: icons, favicon, long names."""
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.template.loader import render_to_string

from apps.core.choices import JobState, NodeState, Outcome
from apps.jobs.models import Job
from apps.pool.services import node_set_drain, nodes_mark_lost

from .factories import finished_job, queued_job

pytestmark = pytest.mark.django_db

CSS = Path(settings.BASE_DIR, "static", "css", "e31.css")


@pytest.mark.parametrize("state, outcome", [(s, "") for s in JobState.values if s != "released"]
                         + [("released", o) for o in Outcome.values])
def test_every_state_and_outcome_shows_words_and_a_drawn_icon(state, outcome):
    job = Job(state=state, outcome=outcome)
    html = render_to_string("includes/state.html", {"job": job})
    icon = re.search(r'<svg class="icon icon-(\w+)"[^>]*aria-hidden="true"[^>]*>(.*?)</svg>', html, re.S)
    assert icon and icon.group(1) == (outcome or state)
    assert re.search(r"<(path|circle|rect)\b", icon.group(2))  # something is drawn
    words = job.get_state_display() + (f" · {job.get_outcome_display()}" if outcome else "")
    assert words in html


def test_icons_are_not_font_glyphs_that_some_systems_lack():
    css = CSS.read_text()
    for glyph in "◷◆▶⇪■✓✗⊘⌛⚠●◐○":
        assert not re.search(rf"\.(state|outcome|node|step)[\w-]*[^{{}}]*{{[^}}]*content:\s*\"{glyph}\"", css), glyph


@pytest.mark.parametrize("state", NodeState.values)
def test_node_states_have_icons_too(frozen_clock, staff_web, node, state, settings):
    if state == NodeState.DRAINING:
        node_set_drain(node=node, drain=True)  # as the operator drains it
    elif state == NodeState.DOWN:
        frozen_clock.advance(settings.E31_NODE_LOSS_TIMEOUT_S + 1)  # its agent falls silent
        assert nodes_mark_lost() == [node.pk]
    node.refresh_from_db()
    assert node.state == state
    html = staff_web.get("/pool/").content.decode()
    assert f'<svg class="icon icon-{state}"' in html


def test_pages_link_the_favicon(web):
    html = web.get("/").content.decode()
    assert re.search(r'<link rel="icon" href="/static/favicon\.svg" type="image/svg\+xml">', html)
    path = finders.find("favicon.svg")
    assert path and Path(path).read_text().lstrip().startswith("<svg")


def test_a_long_name_without_spaces_wraps_in_a_capped_cell(web, user, node):
    long = "é" * 100
    queued_job(user, name=long)
    html = web.get("/").content.decode()
    assert re.search(rf'<td class="cell-name"><a class="name-text" href="/jobs/\d+/">{long}</a></td>', html)
    css = CSS.read_text()
    assert re.search(r"\.table \.cell-name \{[^}]*overflow-wrap: anywhere", css)
    assert re.search(r"\.table \.name-text \{[^}]*max-width:", css)
    assert re.search(r"\.table-wrap \{[^}]*overflow-x: auto", css)


def test_the_usage_table_caps_the_job_name_too(web, user, node):
    finished_job(user, name="é" * 100)
    html = web.get("/usage/").content.decode()
    assert re.search(r'<td class="cell-name"><span class="name-text"><a href="/jobs/\d+/">#\d+</a> é{100}', html)
    assert '<div class="table-wrap">' in html


def test_moved_helpers_live_in_selectors_and_display():
    from apps.metering.display import rate_text
    from apps.metering.selectors import gpu_hours_by_day, price_estimate, rate_table  # noqa: F401
    from apps.pool.selectors import nodes_overview  # noqa: F401

    assert [rate_text(Decimal(x)) for x in ("2.4900", "3", "0.0125")] == ["2.49", "3.00", "0.0125"]
    assert price_estimate({"gpus": "x", "time_limit": "1h"}) is None
