"""Guardrails for the folder-to-namespace mapping (docs: pyproject.toml [tool.setuptools])."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed() -> None:
    """setuptools silently drops a subpackage missing from the explicit list, and warns for a
    folder of shipped data that is not listed."""
    mapping = CONFIG["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for path in (ROOT / folder).rglob("*"):
            if path.name == "__pycache__" or "__pycache__" in path.parts:
                continue
            if path.is_dir() and (
                (path / "__init__.py").exists()
                or any(f.suffix in {".j2", ".json", ".yaml"} for f in path.iterdir())
            ):
                found.add(".".join([package, *path.relative_to(ROOT / folder).parts]))
        found.add(package)
    assert found == set(CONFIG["packages"])
    assert set(CONFIG["package-data"]) - {"*"} <= found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel pip builds from this tree, and everything the build printed."""
    folder = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(folder), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    (path,) = folder.glob("whyjob-*.whl")
    return path, built.stdout + built.stderr


def test_install_prints_no_build_warnings(wheel: tuple[Path, str]) -> None:
    """A newcomer's first command must not print setuptools warnings that read as a failure."""
    printed = wheel[1]
    assert "would be ignored" not in printed
    assert "is absent from the `packages` configuration" not in printed


def test_no_bare_top_level_imports() -> None:
    """Only whyjob.* is importable; a bare `import cli` would load the folder a second time."""
    for folder in CONFIG["package-dir"].values():
        for source in (ROOT / folder).rglob("*.py"):
            for line in source.read_text().splitlines():
                stripped = line.strip()
                for name in CONFIG["package-dir"].values():
                    assert not stripped.startswith((f"import {name}", f"from {name} ")), (
                        source,
                        line,
                    )


def test_wheel_carries_rules_templates_and_schema(wheel: tuple[Path, str]) -> None:
    names = set(zipfile.ZipFile(wheel[0]).namelist())
    for rule in (ROOT / "rules").glob("*.yaml"):
        assert f"whyjob/rules/{rule.name}" in names
    for template in (ROOT / "explain" / "templates").glob("*.j2"):
        assert f"whyjob/explain/templates/{template.name}" in names
    assert "whyjob/core/schema/explanation.v1.json" in names
    for package in CONFIG["packages"]:
        folder = package.replace(".", "/")
        assert any(name.startswith(f"{folder}/") for name in names), package
        if (
            (ROOT / CONFIG["package-dir"][".".join(package.split(".")[:2])])
            .joinpath(*package.split(".")[2:], "__init__.py")
            .exists()
        ):
            assert f"{folder}/__init__.py" in names
    assert "whyjob/cli/py.typed" in names
