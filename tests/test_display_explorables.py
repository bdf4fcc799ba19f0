"""Tests for mha.display.explorables: an explorable as a cell's output, for the site and
JupyterLab alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha.display import explorables
from mha.display.explorables import MIME, LiveFiles, explorable


@pytest.mark.parametrize("name", sorted(explorables.FIGURES))
def test_an_explorable_carries_its_name_and_its_element_with_every_script(name: str) -> None:
    figure = explorable(name)
    bundle = figure._repr_mimebundle_()
    assert bundle[MIME] == {"name": name, "id": f"explore-{name}"}
    page = bundle["text/html"]
    assert page.startswith(figure.html(scripts=False))
    assert f'id="explore-{name}"' in page
    scripts = explorables.FIGURES[name].scripts
    assert page.count("<script>") == len(scripts)
    for script in scripts:  # each script's text, in order, none closed early by its own "</"
        text = (explorables.STATIC / script).read_text(encoding="utf8").replace("</", "<\\/")
        assert text in page
    positions = [page.index((explorables.STATIC / s).read_text("utf8")[:200]) for s in scripts]
    assert positions == sorted(positions)
    assert page.count("</script>") == len(scripts)


def test_a_figure_has_an_id_and_marks_what_print_leaves_out() -> None:
    page = explorable("heads", element_id="x").html(scripts=False)
    assert page.startswith('<div class="mha-explore" data-explore="heads" id="x">')
    live = explorable("live-minilm").html(scripts=False)
    assert 'id="explore-live-minilm"' in live and 'data-mha-still="none"' in live
    assert 'data-mha-still-text="a live MiniLM' in live
    for name in ("heads", "kv-cache", "online-softmax"):  # their rows of controls
        script = (explorables.STATIC / f"mha-explore-{name}.js").read_text(encoding="utf8")
        assert '"data-mha-control": ""' in script


def test_the_live_panel_says_the_download_before_its_button_or_that_it_is_not_built() -> None:
    files = LiveFiles(
        base="/files/_build/html/_static/live-minilm/",
        model_bytes=43_100_000,
        runtime_bytes=14_200_000,
    )
    page = explorables.Explorable("live-minilm", "live", files).html(scripts=False)
    assert 'Load the model and run it <span class="mha-live-size">(57.3 MB)</span>' in page
    assert "downloads 57.3 MB: the model 43.1 MB, its runtime 14.2 MB." in page
    assert 'data-live-base="/files/_build/html/_static/live-minilm/"' in page
    assert 'data-state="idle"' in page
    missing = explorables.Explorable("live-minilm", "live", None).html(scripts=False)
    assert 'data-state="unavailable"' in missing and "disabled>Load the model" in missing
    assert "make book" in missing and "data-live-base" not in missing


def test_served_live_files_need_a_built_manifest(tmp_path: Path) -> None:
    assert explorables.served_live_files(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"model_bytes": 1, "runtime_bytes": 2}))
    files = explorables.served_live_files(tmp_path)
    assert files is None or (files.model_bytes, files.runtime_bytes) == (1, 2)


def test_explorable_refuses_a_name_the_book_has_not() -> None:
    with pytest.raises(ValueError, match=r"name must be one of \[.*'heads'.*\]; got 'head'"):
        explorable("head")
