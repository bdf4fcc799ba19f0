"""The order of a session that builds the book: the unit tests first, beside the build; the
chapters that time nothing one at a time once the site is built, then two at a time, the
longest first; the late jobs after the PDF."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import background
import early_build
import late_jobs
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
    path: Path = Path("test_x.py")
    nodeid: str = ""
    callspec: object = None

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


def test_chapters_run_longest_first_where_the_build_timed_them(tmp_path: Path) -> None:
    times = tmp_path / "execution_times.json"
    times.write_text(
        json.dumps({"book/b": {"runtime": 2.0}, "book/c": {"runtime": 90.0}, "book/d": {}})
    )
    assert background.longest_first(["a", "b", "c", "d"], times) == ["c", "b", "a", "d"]
    assert background.longest_first(["a", "b"], tmp_path / "absent.json") == ["a", "b"]


def test_late_jobs_run_in_turn_after_the_process_they_wait_for(monkeypatch) -> None:
    ran: list[tuple[str, int | None]] = []
    pdf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    jobs = {name: lambda name=name: ran.append((name, pdf.poll())) or name for name in "ab"}
    monkeypatch.setattr(late_jobs, "JOBS", jobs)
    monkeypatch.setattr(late_jobs, "TESTS", {"a": lambda item: True, "b": lambda item: False})
    monkeypatch.setattr(late_jobs, "_jobs", {})
    late_jobs.start([Item("x")], after=pdf)
    assert late_jobs.result("a") == "a"
    assert ran == [("a", 0)]  # after the process ended; "b" was not asked for
    assert late_jobs.result("b") == "b" and ran[-1][0] == "b"  # run now


@dataclass
class Callspec:
    params: dict = field(default_factory=dict)


def chapter_test(stem: str) -> Item:
    return Item(stem, (), ("chapter",), Path("test_chapters.py"), callspec=Callspec({"stem": stem}))


def test_a_chapter_times_itself_when_it_imports_the_timers(tmp_path: Path) -> None:
    imports = {
        "a": "from mha.cost import arithmetic, timings\n",
        "b": "import mha.cost.timings as t\n",
        "c": "from mha.cost.timings import time_forms\n",
        "d": "from mha.cost import arithmetic\n`mha.cost.timings` in the text, not imported\n",
    }
    for stem, text in imports.items():
        (tmp_path / f"{stem}.md").write_text(f"# {stem}\n\n```{{code-cell}}\n{text}```\n")
    assert [stem for stem in imports if background.times_itself(stem, tmp_path)] == list("abc")


def test_untimed_chapters_run_one_at_a_time_until_the_chapter_tests_come(monkeypatch) -> None:
    running, most, lock = [0], [0], threading.Lock()
    timed_started: list[int] = []

    def run(stem: str) -> list[str]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if stem == "timed":
                timed_started.append(most[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return []

    monkeypatch.setattr(background, "run_chapter", run)
    monkeypatch.setattr(background, "times_itself", lambda stem: stem == "timed")
    monkeypatch.setattr(background, "longest_first", lambda stems: stems)
    monkeypatch.setattr(background, "_pool", [])
    monkeypatch.setattr(background, "_chapters", {})
    monkeypatch.setattr(background, "_slots", threading.Semaphore(1))
    monkeypatch.setattr(background, "_widened", [])
    background.start_chapters([chapter_test(stem) for stem in ("one", "two", "timed")])
    runs = dict(background._chapters)
    assert list(runs) == ["one", "two"]  # the timed chapter waits for the chapter tests
    runs["two"].result(timeout=10)
    assert most[0] == 1  # one at a time beside the browser tests
    runs = background.chapters(["one", "two", "timed", "three"])
    assert [runs[stem].result(timeout=10) for stem in runs] == [[], [], [], []]
    assert timed_started and most[0] == 2  # two at a time once the chapter tests come
