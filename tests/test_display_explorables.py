"""Tests for mha.display.explorables: an explorable as a cell's output, for the site and
JupyterLab alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mha.display import explorables, live_decoder
from mha.display.explorables import MIME, LiveFiles, explorable
from mha.training import runs

DATA = {"note": "a figure's data, with </script> in it", "values": [1.5, 2]}


def _data(name: str) -> dict | None:
    return DATA if explorables.FIGURES[name].needs_data else None


@pytest.mark.parametrize("name", sorted(explorables.FIGURES))
def test_an_explorable_carries_its_name_and_its_element_with_every_script(name: str) -> None:
    figure = explorable(name, data=_data(name))
    bundle = figure._repr_mimebundle_()
    expected = {"name": name, "id": f"explore-{name}"}
    if _data(name) is not None:
        expected["data"] = DATA
    assert bundle[MIME] == expected
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
    data_scripts = int(_data(name) is not None)  # its data: one more script, of JSON
    assert page.count("</script>") == len(scripts) + data_scripts


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
    with pytest.raises(ValueError, match=r"name must be one of \(.*'heads'.*\); got name='head'"):
        explorable("head")
    with pytest.raises(TypeError, match=r"element_id must be a str; got int"):
        explorable("heads", element_id=3)


def test_a_figures_data_is_json_in_its_element_on_the_site_and_in_jupyterlab() -> None:
    figure = explorable("induction-heads", data=DATA)
    element = figure.html(scripts=False)
    opening = '<script type="application/json" class="mha-explore-data">'
    assert element.count(opening) == 1 and element.endswith("</script></div>\n")
    text = element.split(opening)[1].removesuffix("</script></div>\n")
    assert "</" not in text, "the data closes its script early"
    assert json.loads(text) == DATA
    assert figure._repr_mimebundle_()["text/html"].startswith(element)
    with pytest.raises(ValueError, match=r"the figure 'induction-heads' needs data; got data=None"):
        explorable("induction-heads")
    with pytest.raises(ValueError, match=r"the figure 'heads' takes no data; got data=a dict"):
        explorable("heads", data=DATA)
    with pytest.raises(TypeError, match=r"data must be a dict or None; got list"):
        explorable("induction-heads", data=[1])


def test_on_the_site_a_figures_data_is_named_not_inline() -> None:
    figure = explorable("induction-heads", data=DATA)
    element = figure.html(scripts=False, data_name="book-x-explore-induction-heads")
    assert element.startswith(
        '<div class="mha-explore" data-explore="induction-heads" id="explore-induction-heads" '
        'data-explore-data="book-x-explore-induction-heads"><p class="mha-explore-fallback">'
    )
    assert "mha-explore-data" not in element and json.dumps(DATA)[:20] not in element
    assert '<script type="application/json" class="mha-explore-data">' in figure.html(scripts=False)
    with pytest.raises(ValueError, match=r"data_name is for a figure with data; the figure "):
        explorable("heads").html(scripts=False, data_name="x")
    with pytest.raises(TypeError, match=r"data_name must be a str; got int"):
        figure.html(scripts=False, data_name=3)


def _scores() -> dict[str, np.ndarray]:
    return {"previous_token": np.full((2, 4), 0.25), "induction": np.arange(8.0).reshape(2, 4)}


def test_the_decoders_data_is_its_model_rounded_to_float16_and_its_task() -> None:
    config = runs.TrainConfig(seed=3, min_period=5, max_period=11, prefix_prob=0.25)
    model = config.model()
    data = live_decoder.decoder_data(
        model, _scores(), previous_token_head=2, induction_head=1, config=config
    )
    assert data["heads"] == {
        "previous_token": {"layer": 0, "head": 2, "score": 0.25},
        "induction": {"layer": 1, "head": 1, "score": 5.0},
    }
    assert data["task"] == {"min_period": 5, "max_period": 11, "prefix_prob": 0.25}
    assert (data["max_len"], data["vocab_size"]) == (config.seq_len, config.vocab_size)
    assert data["alphabet"] == live_decoder.ALPHABET and len(set(data["alphabet"])) == 64
    rebuilt = live_decoder.decoder_model(json.loads(json.dumps(data)))
    assert rebuilt.embed.dtype == torch.float64
    for (name, original), (other, back) in zip(
        model.state_dict().items(), rebuilt.state_dict().items(), strict=True
    ):
        assert name == other
        rounded = original.to(torch.float16).double()
        same = torch.equal(back, rounded)  # exact: float16 values are exact in float64
        assert same, f"{name} is not its float16 rounding"


def test_the_decoders_data_refuses_what_the_figure_cannot_show() -> None:
    config = runs.TrainConfig(seed=3)
    model = config.model()
    heads = {"previous_token_head": 0, "induction_head": 0}
    with pytest.raises(ValueError, match=r"induction_head must be in \[0, 4\); got"):
        live_decoder.decoder_data(
            model, _scores(), previous_token_head=0, induction_head=4, config=config
        )
    one_layer = runs.TrainConfig(num_layers=1).model()
    with pytest.raises(ValueError, match=r"model must have 2 layers"):
        live_decoder.decoder_data(one_layer, _scores(), **heads, config=config)
    with pytest.raises(ValueError, match=r"scores\['induction'\] must have shape \(2, 4\)"):
        bad = {**_scores(), "induction": np.zeros(4)}
        live_decoder.decoder_data(model, bad, **heads, config=config)
    with pytest.raises(ValueError, match=r"scores\['previous_token'\] must be finite"):
        bad = {**_scores(), "previous_token": np.full((2, 4), np.nan)}
        live_decoder.decoder_data(model, bad, **heads, config=config)
    with pytest.raises(TypeError, match=r"config must be a TrainConfig; got dict"):
        live_decoder.decoder_data(model, _scores(), **heads, config={"min_period": 8})
    with pytest.raises(TypeError, match=r"config must be a TrainConfig; got DigitSumConfig"):
        live_decoder.decoder_data(model, _scores(), **heads, config=runs.DigitSumConfig())
    shorter = runs.TrainConfig(seq_len=24, min_period=4, max_period=12)
    with pytest.raises(
        ValueError,
        match=r"config must be the model's task: seq_len = max_len and vocab_size = V; got "
        r"seq_len=24, vocab_size=64 for a model with max_len=32, V=64",
    ):
        live_decoder.decoder_data(model, _scores(), **heads, config=shorter)
    with pytest.raises(ValueError, match=r"got seq_len=32, vocab_size=48 for a model with"):
        live_decoder.decoder_data(model, _scores(), **heads, config=runs.TrainConfig(vocab_size=48))
    assert live_decoder.encode("AZaz09+/") == [0, 25, 26, 51, 52, 61, 62, 63]
    with pytest.raises(ValueError, match=r"0-9 \+ /; got 'é' at 1"):
        live_decoder.encode("Aé")
