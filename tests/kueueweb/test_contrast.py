"""The colour palette meets WCAG 2.1 AA in both themes: the custom properties declared in the
style sheets' ``:root`` blocks (light) and their ``prefers-color-scheme: dark`` overrides are
read from the files and every foreground/background pair the UI uses is measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS_DIR = Path(__file__).resolve().parents[2] / "static" / "css"
STYLE_SHEETS = ("app.css", "queues.css", "workloads.css")

# Normal-size text needs 4.5:1 (WCAG 2.1, 1.4.3).
AA_TEXT = 4.5
SURFACES = ("--bg", "--card")
# Colours used for text on the page background and inside cards.
TEXT_COLOURS = (
    "--fg",
    "--muted",
    "--accent",
    "--err",
    "--ok",
    "--warn",
    "--info",
    "--done",
    "--q-borrowed-text",
)
# Text on a filled background: the primary and the danger buttons.
FILLED = (("--on-accent", "--accent"), ("--on-err", "--err"))

_ROOT = re.compile(r":root\s*\{([^}]*)\}")
_DARK = re.compile(r"@media\s*\(prefers-color-scheme:\s*dark\)\s*\{\s*:root\s*\{([^}]*)\}")
_VAR = re.compile(r"(--[\w-]+)\s*:\s*([^;]+);")


def _declarations(block: str) -> dict[str, str]:
    return {name: value.strip() for name, value in _VAR.findall(block)}


def palettes() -> dict[str, dict[str, str]]:
    """The custom properties of each theme: the light ones, and the dark ones (the light
    ones with the dark overrides on top)."""
    light: dict[str, str] = {}
    dark: dict[str, str] = {}
    for name in STYLE_SHEETS:
        css = (CSS_DIR / name).read_text()
        dark_blocks = _DARK.findall(css)
        for block in dark_blocks:
            dark.update(_declarations(block))
        without_dark = _DARK.sub("", css)
        for block in _ROOT.findall(without_dark):
            light.update(_declarations(block))
    return {"light": light, "dark": {**light, **dark}}


def luminance(colour: str) -> float:
    """Relative luminance of an opaque ``#rrggbb`` colour (WCAG 2.1 definition)."""
    assert re.fullmatch(r"#[0-9a-fA-F]{6}", colour), f"{colour!r} is not an opaque #rrggbb"
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_contrast_formula_matches_known_ratios() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    assert contrast("#ffffff", "#ffffff") == pytest.approx(1)


def test_both_themes_declare_every_colour_checked() -> None:
    themes = palettes()
    needed = set(SURFACES) | set(TEXT_COLOURS) | {name for pair in FILLED for name in pair}
    for theme, palette in themes.items():
        assert needed <= palette.keys(), (theme, needed - palette.keys())
    # The dark theme really overrides the surfaces, so it is measured on its own colours.
    assert themes["dark"]["--bg"] != themes["light"]["--bg"]


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("text", TEXT_COLOURS)
def test_text_colours_meet_aa_on_every_surface(theme: str, surface: str, text: str) -> None:
    palette = palettes()[theme]
    ratio = contrast(palette[text], palette[surface])
    assert ratio >= AA_TEXT, (
        f"{theme}: {text} {palette[text]} on {surface} {palette[surface]} is {ratio:.2f}:1"
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("text", "fill"), FILLED)
def test_text_on_filled_buttons_meets_aa(theme: str, text: str, fill: str) -> None:
    palette = palettes()[theme]
    ratio = contrast(palette[text], palette[fill])
    assert ratio >= AA_TEXT, (
        f"{theme}: {text} {palette[text]} on {fill} {palette[fill]} is {ratio:.2f}:1"
    )
