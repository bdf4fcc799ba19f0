"""The order of a session that builds the book: the unit tests first, beside the build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import early_build
import pytest

# The tests' own conftest.py, as pytest registered it: `import conftest` may give another
# folder's conftest.py (tests/browser/) when both are collected in one session.
CONFTEST = str(Path(__file__).with_name("conftest.py"))


@dataclass
class Item:
    """What the ordering reads of a collected test: its name, fixtures and markers."""

    name: str
    fixturenames: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()

    def iter_markers(self):
        return (getattr(pytest.mark, name).mark for name in self.markers)


def test_unit_tests_run_first_and_every_group_keeps_its_order(pytestconfig) -> None:
    items = [
        Item("visit", ("site_url", "built_site"), ("browser", "site")),
        Item("unit_a"),
        Item("chapter", (), ("chapter",)),
        Item("site_check", ("built_site",)),
        Item("unit_b", ("tmp_path",)),
        Item("portable", (), ("portability",)),
        Item("clone", (), ("slow",)),
    ]
    conftest = pytestconfig.pluginmanager.get_plugin(CONFTEST)
    conftest.pytest_collection_modifyitems(items)
    assert [item.name for item in items] == [
        "unit_a",
        "unit_b",
        "visit",
        "chapter",
        "site_check",
        "portable",
        "clone",
    ]


def test_only_a_test_that_uses_the_built_site_asks_for_the_build() -> None:
    assert early_build.needs_site(Item("site_check", ("tmp_path", "built_site")))
    assert not early_build.needs_site(Item("chapter", ("tmp_path",), ("chapter",)))
    assert not early_build.needs_site(Item("unit_a"))
