"""``scripts/execute_chapters.py`` caches chapters where the book's build finds them."""

from __future__ import annotations

from pathlib import Path

import execute_chapters
import yaml
from jupyter_cache import get_cache
from myst_nb.core.config import NbParserConfig
from myst_nb.core.read import create_nb_reader
from myst_parser.config.main import MdParserConfig

ROOT = Path(__file__).resolve().parents[1]

CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
x = 6 * 7
```

```{code-cell} ipython3
:tags: [hide-input]
print(x)
```
"""


def read_as_the_build_does(path: Path):
    """The notebook as myst-nb reads it in the build, with the book's Markdown extensions."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    extensions = set(config["parse"]["myst_enable_extensions"])
    content = path.read_text(encoding="utf8")
    md_config = MdParserConfig(enable_extensions=extensions)
    reader = create_nb_reader(str(path), md_config, NbParserConfig(), content)
    return reader.read(content)


def test_an_executed_chapter_is_found_by_the_builds_reader(tmp_path: Path, capsys) -> None:
    chapter, cache = tmp_path / "chapter.md", tmp_path / "cache"
    chapter.write_text(CHAPTER, encoding="utf8")
    executed = execute_chapters.execute_missing([chapter], cache, timeout=60, jobs=2)
    assert executed == [str(chapter.absolute())]
    assert "chapter.md  executed" in capsys.readouterr().out

    _, merged = get_cache(cache).merge_match_into_notebook(read_as_the_build_does(chapter))
    assert merged.cells[2].outputs[0]["text"] == "42\n"
    assert execute_chapters.execute_missing([chapter], cache, timeout=60, jobs=2) == []


def test_a_chapter_that_fails_is_left_for_the_build(tmp_path: Path, capsys) -> None:
    chapter, cache = tmp_path / "chapter.md", tmp_path / "cache"
    chapter.write_text(CHAPTER.replace("x = 6 * 7", "x = 1 / 0"), encoding="utf8")
    assert execute_chapters.execute_missing([chapter], cache, timeout=60, jobs=2) == [
        str(chapter.absolute())
    ]
    assert "failed (CellExecutionError); the build runs it again" in capsys.readouterr().out
    assert get_cache(cache).list_cache_records() == []


def test_the_notebooks_are_the_toc_pages_in_reading_order() -> None:
    names = [path.stem for path in execute_chapters.notebooks()]
    assert names[:2] == ["preface", "one-head-to-many"]
    assert "trained-heads" in names and "api-core" in names
