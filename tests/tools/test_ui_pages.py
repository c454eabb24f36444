"""The page list shared by the accessibility tests and the screenshot tool, and the UI tour
that shows its screenshots."""

from __future__ import annotations

import re

from tests.fixtures.processes import ROOT
from tools.ui_pages import PAGES

TOUR = ROOT / "docs" / "ui.md"


def test_page_names_are_unique_and_usable_as_file_names() -> None:
    names = [page.name for page in PAGES]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in names)


def test_every_screenshot_the_tour_shows_exists_and_names_a_listed_page() -> None:
    shown = re.findall(r"\((ui/([a-z0-9-]+)-(1440|390)-(light|dark)\.png)\)", TOUR.read_text())
    assert shown, "the tour shows no screenshot"
    names = {page.name for page in PAGES}
    for path, page, _width, _theme in shown:
        assert page in names, f"{path}: no page {page!r} in tools/ui_pages.py"
        assert (ROOT / "docs" / path).is_file(), f"{path} is missing: run tools/screenshots.py"
