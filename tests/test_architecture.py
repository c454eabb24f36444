"""The engine packages import the standard library only, and never Django."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE_PACKAGES = ("scheduling/core", "multicluster/core")
ALLOWED_PREFIXES = ("scheduling.core", "multicluster.core")
PURE_FILES = sorted(p for pkg in PURE_PACKAGES for p in (ROOT / pkg).glob("*.py"))


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # relative imports stay inside the pure package
                continue
            names.append(node.module or "")
    return names


def _allowed(module: str) -> bool:
    top = module.split(".")[0]
    if module.startswith(ALLOWED_PREFIXES) or top == "__future__":
        return True
    return top in sys.stdlib_module_names


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_import_only_the_standard_library(path: Path) -> None:
    offending = [m for m in _imports(path) if not _allowed(m)]
    assert offending == []


def test_the_engine_has_files_to_check() -> None:
    assert any(p.parent.name == "core" and p.parent.parent.name == "scheduling" for p in PURE_FILES)


def test_importing_the_engine_does_not_load_django() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = "import scheduling.core, sys; assert 'django' not in sys.modules, 'django imported'"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
