"""Screenshots of the UI: every page of ``tools.ui_pages.PAGES`` at 1440 and 390 px wide, in
the light and the dark theme, written as ``docs/ui/<page>-<width>-<theme>.png``.

It starts nothing: it signs in to a kueueweb that is running already, for instance the one
``make run`` serves with its demo data::

    KUEUEWEB_ADMIN_PASSWORD='a long password' PORT=8791 make run     # one terminal
    KUEUEWEB_ADMIN_PASSWORD='a long password' \\
        .venv/bin/python tools/screenshots.py --base-url http://127.0.0.1:8791

The user is ``admin`` (the superuser ``manage.py ensure_admin`` creates) unless
``--username`` says otherwise; the password is read from ``KUEUEWEB_ADMIN_PASSWORD``, never
from the command line. Pages are captured whole, down to ``--max-height`` pixels. The
browser is Chromium driven by Playwright (``--chromium``, Debian's by default).

    --only overview workloads   only these pages (names as in tools/ui_pages.py)
    --out docs/ui               where the PNG files go
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.ui_pages import PAGES, UIPage, open_ui_page  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {1440: 900, 390: 844}  # width: viewport height
THEMES = ("light", "dark")
PASSWORD_ENV = "KUEUEWEB_ADMIN_PASSWORD"


class ScreenshotError(Exception):
    """A reason the run cannot go on, said in the user's terms."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Screenshot every UI page at 1440 and 390 px, light and dark."
    )
    parser.add_argument(
        "--base-url",
        default="http://127.0.0.1:8000",
        help="a running kueueweb (default: %(default)s)",
    )
    parser.add_argument("--username", default="admin", help="user to sign in as")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "ui",
        help="directory for the PNG files (default: docs/ui)",
    )
    parser.add_argument(
        "--max-height",
        type=int,
        default=4000,
        help="cut full-page captures at this many pixels (default: %(default)s)",
    )
    parser.add_argument(
        "--chromium", default="/usr/bin/chromium", help="Chromium executable (default: %(default)s)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="PAGE",
        choices=[p.name for p in PAGES],
        help="only these pages",
    )
    args = parser.parse_args(argv)
    if args.max_height < 100:
        parser.error("--max-height: at least 100 pixels")
    return args


def sign_in(page: Any, username: str, password: str) -> None:
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    if "/login/" in page.url:
        raise ScreenshotError(
            f"signing in as {username!r} failed: check {PASSWORD_ENV} and --username"
        )


def capture(page: Any, ui_page: UIPage, path: Path, width: int, max_height: int) -> None:
    open_ui_page(page, ui_page)
    # Charts draw after load; let their first animation finish.
    page.wait_for_timeout(800)
    height = min(page.evaluate("document.documentElement.scrollHeight"), max_height)
    page.screenshot(
        path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height}
    )


def take_screenshots(args: argparse.Namespace, password: str) -> list[Path]:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    pages = [p for p in PAGES if not args.only or p.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
        try:
            for width, height in WIDTHS.items():
                for theme in THEMES:
                    options = {
                        "base_url": args.base_url,
                        "color_scheme": theme,
                        "viewport": {"width": width, "height": height},
                    }
                    signed_in = browser.new_context(**options).new_page()
                    anonymous = browser.new_context(**options).new_page()
                    try:
                        signed_in.goto("/login/")
                    except PlaywrightError as exc:
                        raise ScreenshotError(
                            f"no kueueweb answers at {args.base_url}: {exc.message}"
                        ) from exc
                    sign_in(signed_in, args.username, password)
                    for ui_page in pages:
                        path = args.out / f"{ui_page.name}-{width}-{theme}.png"
                        page = signed_in if ui_page.signed_in else anonymous
                        capture(page, ui_page, path, width, args.max_height)
                        written.append(path)
                        sys.stdout.write(f"{path}\n")
                    signed_in.context.close()
                    anonymous.context.close()
        finally:
            browser.close()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    password = os.environ.get(PASSWORD_ENV, "")
    if not password:
        sys.stderr.write(
            f"{PASSWORD_ENV} is not set: it holds the password of {args.username!r}.\n"
        )
        return 2
    if not Path(args.chromium).exists():
        sys.stderr.write(f"--chromium: {args.chromium} does not exist.\n")
        return 2
    try:
        written = take_screenshots(args, password)
    except (ScreenshotError, AssertionError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write(f"{len(written)} screenshots in {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
