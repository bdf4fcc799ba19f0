"""What a package and an open book are expected to carry: licences, metadata, citation.

Also the choice of Python for ``.venv`` (``scripts/find_python.sh``): any Python of at least
3.11 the machine has, not ``python3.11`` by name; and no module of ``src/mha`` over 800 lines
(the site's own files are held to 500 in ``test_site_build.py``); and every package the
library imports named in ``pyproject.toml``, as a dependency or in an extra.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import mha

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES = 800  # a module of src/mha


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def test_the_code_is_mit_and_the_book_cc_by_4():
    project = _pyproject()["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert project["license-files"] == ["LICENSE"]
    book = (ROOT / "LICENSE-BOOK.md").read_text()
    assert "Creative Commons Attribution 4.0 International" in book
    assert "Attribution 4.0 International Public License" in book  # the legal code itself


def test_the_spdx_license_string_has_the_setuptools_that_reads_it():
    # A `license = "MIT"` string (PEP 639) needs setuptools 77 or later.
    requires = _pyproject()["build-system"]["requires"]
    assert "setuptools>=77" in requires


def test_the_package_says_who_it_is():
    project = _pyproject()["project"]
    assert project["authors"] and project["classifiers"]
    assert "Typing :: Typed" in project["classifiers"]
    assert (ROOT / "src" / "mha" / "py.typed").exists()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["mha"]


def test_the_addresses_follow_the_repository_of_config():
    # _config.yml names the repository; the package's and the citation's addresses follow it.
    repo = _repository_url()
    owner, name = repo.removeprefix("https://github.com/").split("/")
    site = f"https://{owner.lower()}.github.io/{name}/"
    urls = _pyproject()["project"]["urls"]
    assert urls["Source"] == repo
    assert urls["Issues"] == f"{repo}/issues"
    assert urls["Homepage"] == site
    assert urls["Changelog"].startswith(site)
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["repository-code"] == repo
    assert citation["url"] == site


def test_the_citation_is_valid_and_has_the_packages_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "version", "license"):
        assert citation[key], key
    assert citation["version"] == mha.__version__
    assert set(citation["license"]) == {"MIT", "CC-BY-4.0"}


def _fake_python(folder: Path, name: str, version: str) -> None:
    """A stand-in interpreter: this Python, reporting ``version`` as its ``sys.version_info``."""
    major, minor = (int(part) for part in version.split("."))
    fake = f"import sys; sys.version_info = ({major}, {minor}, 0, 'final', 0); exec(sys.argv[1])"
    path = folder / name
    path.write_text(f'#!/bin/sh\n[ "$1" = -c ] || exit 2\nexec {sys.executable} -c "{fake}" "$2"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _find_python(path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "find_python.sh")],
        env={"PATH": str(path), **env},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("installed", "chosen"),
    [
        ({"python3": "3.13"}, "python3"),  # a newer python3 is taken as it is
        ({"python3": "3.10", "python3.12": "3.12"}, "python3.12"),
        ({"python3": "3.9", "python3.11": "3.11"}, "python3.11"),
    ],
)
def test_any_python_of_at_least_3_11_makes_the_environment(tmp_path, installed, chosen):
    for name, version in installed.items():
        _fake_python(tmp_path, name, version)
    result = _find_python(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == chosen


def test_no_python_new_enough_is_said_by_name(tmp_path):
    _fake_python(tmp_path, "python3", "3.10")
    result = _find_python(tmp_path)
    assert result.returncode == 1
    assert "no Python 3.11 or newer found" in result.stderr
    assert "python3=3.10" in result.stderr


def test_python_set_by_the_reader_is_the_only_candidate(tmp_path):
    _fake_python(tmp_path, "python3", "3.12")
    _fake_python(tmp_path, "mypython", "3.10")
    result = _find_python(tmp_path, PYTHON="mypython")
    assert result.returncode == 1  # not silently replaced by python3
    assert os.path.basename(result.stderr.split("tried: ")[1].split(";")[0]) == "mypython"


def test_the_published_book_never_reuses_chapters_run_against_another_library():
    """The execution cache is keyed by the chapters' code only; the workflow's cache key adds
    the library, and no fallback key may restore a cache built from other sources."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "publish.yml").read_text())
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    caches = [s for s in steps if s.get("with", {}).get("path") == "_build/.jupyter_cache"]
    assert len(caches) == 1, "one step restores the execution cache"
    settings = caches[0]["with"]
    assert "src/**" in settings["key"] and "book/**" in settings["key"]
    assert "restore-keys" not in settings, "a fallback key restores chapters run on old code"


def test_make_lint_runs_the_type_checker_on_the_package():
    """``make lint`` (part of ``make test``) runs mypy, configured to check ``src/mha``."""
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/mypy" in lint
    assert _pyproject()["tool"]["mypy"]["files"] == ["src/mha"]
    assert _pyproject()["tool"]["mypy"]["check_untyped_defs"] is True  # the forms' bodies
    assert any(
        d.startswith("mypy") for d in _pyproject()["project"]["optional-dependencies"]["test"]
    )


def test_no_module_of_mha_is_over_800_lines():
    modules = sorted((ROOT / "src" / "mha").rglob("*.py"))
    assert modules
    lengths = {path: len(path.read_text(encoding="utf8").splitlines()) for path in modules}
    over = [
        f"{path.relative_to(ROOT).as_posix()}: {n} lines (at most {MODULE_LINES})"
        for path, n in lengths.items()
        if n > MODULE_LINES
    ]
    assert not over, "split these modules by job:\n" + "\n".join(over)


def _third_party_imports() -> set[str]:
    """The top-level names of the packages that ``src/mha`` imports, standard library aside."""
    names = set()
    for path in (ROOT / "src" / "mha").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name != "mha"}


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_package_the_library_imports_is_a_dependency_or_an_extra():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    declared = {_requirement_name(r) for r in project["dependencies"]}
    declared |= {_requirement_name(r) for group in extras.values() for r in group}
    distributions = importlib.metadata.packages_distributions()
    imported = _third_party_imports()
    assert {"numpy", "torch", "plotly", "gguf"} <= imported  # the scan sees the imports
    for name in sorted(imported):
        names = {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
        assert names & declared, f"src/mha imports {name}, which pyproject.toml does not name"
    for extra in ("display", "timing", "models"):  # the library's extras are in the book's too
        assert {_requirement_name(r) for r in extras[extra]} <= {
            _requirement_name(r) for r in extras["book"]
        }, extra
