"""The book's explorables as cell outputs: one source for the site and for JupyterLab.

An explorable is a figure that recomputes in the reader's browser (``book/_static``:
``mha-explore.js`` computes, ``mha-explore-kit.js`` and one script per figure draw; the live
model is ``mha-live-*.js``). A chapter shows one with a code cell whose value is
:func:`explorable`; its output carries two forms:

- ``application/vnd.mha.explorable+json``, the figure's name: the site's build
  (``book/_ext/mha_site/explorables.py``) writes the figure's element
  (:meth:`Explorable.html` without scripts) and loads the scripts from ``_static``;
- ``text/html``, the same element followed by the scripts' text: JupyterLab (or any notebook
  front end that runs the scripts of trusted output) draws the figure from it, offline.

A figure that computes with data the chapter made (``"induction-heads"``: a trained model
and the heads the chapter measured) carries it in the mime form, and in JupyterLab in its
element, as JSON in a ``<script type="application/json" class="mha-explore-data">``. The site
writes the data to a file of its own instead (:meth:`Explorable.html`'s ``data_name``), which
the page loads when the figure comes near and puts into the element as that same script.

The live model (``"live-minilm"``) also needs its files, which ``make book`` writes into
``_build/html/_static/live-minilm``: in JupyterLab the panel loads them through the Jupyter
server that serves the repository, or says that they are not built yet.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mha.core._checks import arguments

MIME = "application/vnd.mha.explorable+json"
"""The mime type of an explorable in a cell's output: ``{"name": ..., "id": ...}``."""

ROOT = Path(__file__).resolve().parents[3]  # the repository (src/mha/display -> ..)
STATIC = ROOT / "book" / "_static"
LIVE_DIR = ROOT / "_build" / "html" / "_static" / "live-minilm"
"""Where ``make book`` writes the live model's files (``scripts/build_live_model.py``)."""


@dataclass(frozen=True)
class Figure:
    """An explorable: its scripts in load order and the text shown where scripts do not run.

    Attributes:
        scripts: the files of ``book/_static`` it needs, in the order they load.
        fallback: one sentence saying what the figure shows, for a reader without scripts.
        needs_data: whether the chapter passes it data (:func:`explorable`'s ``data``).
    """

    scripts: tuple[str, ...]
    fallback: str
    needs_data: bool = False


def _kit(name: str) -> tuple[str, ...]:
    return ("mha-explore.js", "mha-explore-kit.js", f"mha-explore-{name}.js")


FIGURES = {
    "heads": Figure(
        _kit("heads"),
        "An interactive figure: two heads' attention weights for one query token and five keys "
        "in the plane.",
    ),
    "online-softmax": Figure(
        _kit("online-softmax"),
        "An interactive figure: the online softmax of one row of scores, block by block.",
    ),
    "kv-cache": Figure(
        _kit("kv-cache"),
        "An interactive figure: the key/value cache of Llama 2 7B and the bytes one decoding "
        "step reads, as tokens are appended.",
    ),
    "latent-cache": Figure(
        _kit("latent-cache"),
        "An interactive figure: the cache per token of multi-head, grouped-query, multi-query "
        "and latent attention at DeepSeek-V2's sizes, for a latent width and rotary key width "
        "you choose.",
    ),
    "induction-heads": Figure(
        ("mha-explore.js", "mha-explore-model.js", *_kit("induction-heads")[1:]),
        "An interactive figure: the trained two-layer model on a sequence you type, its "
        "previous-token and induction heads attending and its prediction of the next token.",
        needs_data=True,
    ),
    "live-minilm": Figure(
        ("mha-live-tokenizer.js", "mha-live-loader.js", "mha-live-maps.js", "mha-live-minilm.js"),
        "A live model: MiniLM's attention on a sentence you type, computed in your browser.",
    ),
}
"""Every explorable of the book, by name."""


@dataclass(frozen=True)
class LiveFiles:
    """Where the live model's files are served from, and how large they are.

    Attributes:
        base: the URL of their folder (ending in ``/``), or ``None`` for the folder beside the
            page's scripts (``_static/live-minilm/`` on the site).
        model_bytes: the size of the ONNX model the panel downloads.
        runtime_bytes: the size of ONNX Runtime Web (script, module and wasm).
    """

    base: str | None
    model_bytes: int
    runtime_bytes: int

    @classmethod
    def from_manifest(cls, manifest: Any, base: str | None = None) -> LiveFiles:
        """The sizes of a ``manifest.json`` that ``scripts/build_live_model.py`` wrote.

        Args:
            manifest: the manifest read as a dict, with the integer sizes ``"model_bytes"``
                and ``"runtime_bytes"``.
            base: the URL of the files' folder, or ``None`` (see :class:`LiveFiles`).

        Returns:
            The files' sizes and folder.

        Raises:
            TypeError: if ``manifest`` is not a dict, a size is not an int, or ``base`` is
                neither a str nor ``None``.
            ValueError: if a size is missing or negative.
        """
        if not isinstance(manifest, dict):
            raise TypeError(f"manifest must be a dict; got {arguments.describe(manifest)}")
        found = {}
        for key in ("model_bytes", "runtime_bytes"):
            if key not in manifest:
                raise ValueError(
                    f"manifest must have the size {key!r}; got keys {sorted(manifest)}"
                )
            found[key] = arguments.size(f"manifest[{key!r}]", manifest[key], low=0, high=None)
        if base is not None:
            arguments.text("base", base)
        return cls(base, found["model_bytes"], found["runtime_bytes"])


def megabytes(n: int) -> str:
    """A size as the live panel writes it: ``"23.4 MB"`` (decimal megabytes).

    Args:
        n: a number of bytes.

    Returns:
        The size in megabytes, to one decimal.

    Raises:
        TypeError: if ``n`` is not an int.
        ValueError: if ``n`` is negative.
    """
    n = arguments.size("n", n, low=0, high=None)
    return f"{n / 1e6:.1f} MB"


def _live_panel(files: LiveFiles | None, attrs: str) -> str:
    """The live panel's controls; the button says what it downloads before it is pressed."""
    if files is None:
        button = (
            '<button type="button" class="mha-live-load" disabled>Load the model and run it'
            "</button>"
        )
        state = "unavailable"
        status = (
            "The live model's files are not in this build. <code>make book</code> builds them "
            "(it installs ONNX Runtime Web with <code>make node</code> and exports the model); "
            "a plain <code>jupyter-book build</code> adds them once <code>make node</code> has run."
        )
    else:
        total = files.model_bytes + files.runtime_bytes
        button = (
            '<button type="button" class="mha-live-load">Load the model and run it '
            f'<span class="mha-live-size">({megabytes(total)})</span></button>'
        )
        state = "idle"
        status = (
            f"The model is not loaded. The button downloads {megabytes(total)}: the model "
            f"{megabytes(files.model_bytes)}, its runtime {megabytes(files.runtime_bytes)}."
        )
    if files is not None and files.base is not None:
        attrs += f' data-live-base="{html.escape(files.base)}"'
    # printed (the book's PDF): nothing to show before the button; a sentence says what runs
    still = (
        ' data-mha-still="none" data-mha-still-text="a live MiniLM (its attention on a sentence '
        'you type, computed in your browser)"'
    )
    return (
        f'<div class="mha-live-minilm" data-state="{state}"{attrs}{still}>\n'
        '<label for="mha-live-text">Your sentence</label>\n'
        '<textarea id="mha-live-text" rows="2">The keys open doors that the old lock never '
        "knew.</textarea>\n"
        '<div class="mha-live-controls">\n'
        f"{button}\n"
        '<button type="button" class="mha-live-run" disabled>Run on this sentence</button>\n'
        '<label>View <select class="mha-live-view"><option value="weights">attention weights'
        '</option><option value="value-weighted">norm-weighted share</option></select></label>\n'
        "</div>\n"
        f'<p class="mha-live-status" role="status" aria-live="polite">{status}</p>\n'
        '<div class="mha-live-grid" role="group" aria-label="Every head\'s map: rows are layers '
        '1 to 6, columns heads 1 to 12"></div>\n'
        '<div class="mha-live-detail"></div>\n'
        "</div>\n"
    )


@dataclass(frozen=True)
class Explorable:
    """One explorable in a cell's output (:func:`explorable` makes it).

    Attributes:
        name: a key of :data:`FIGURES`.
        element_id: the ``id`` of its element on the page.
        live: the live model's files (``"live-minilm"`` only; ``None``: not built).
        data: the figure's data, JSON-ready (a figure that needs data only).
    """

    name: str
    element_id: str
    live: LiveFiles | None = None
    data: Any = None

    def html(self, *, scripts: bool, data_name: str | None = None) -> str:
        """The figure's element, followed by its scripts' text if ``scripts``.

        Args:
            scripts: include the scripts (JupyterLab); the site loads them from ``_static``.
            data_name: the name of the file that holds the figure's data on the site (the
                site's build writes it, and ``mha-explore-kit.js`` loads it when the figure
                comes near); ``None``: the data inline in the element, as a notebook needs
                it. Only for a figure with data.

        Returns:
            HTML text.

        Raises:
            TypeError: if ``scripts`` is not a bool, or ``data_name`` neither a str nor
                ``None``.
            ValueError: if ``data_name`` is given for a figure without data.
        """
        arguments.check_bool("scripts", scripts)
        if data_name is not None:
            arguments.text("data_name", data_name)
            if self.data is None:
                raise ValueError(
                    f"data_name is for a figure with data; the figure {self.name!r} has none, "
                    f"got data_name={data_name!r}"
                )
        figure = FIGURES[self.name]
        if self.name == "live-minilm":
            element = _live_panel(self.live, f' id="{self.element_id}"')
        else:
            if data_name is None:
                attrs, inline = "", _data_script(self.data)
            else:
                attrs, inline = f' data-explore-data="{html.escape(data_name)}"', ""
            element = (
                f'<div class="mha-explore" data-explore="{self.name}" id="{self.element_id}"'
                f'{attrs}><p class="mha-explore-fallback">{html.escape(figure.fallback)} It '
                f"needs JavaScript.</p>{inline}</div>\n"
            )
        if not scripts:
            return element
        return element + "".join(
            f"<script>\n{_script(name)}\n</script>\n" for name in figure.scripts
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, object]:
        content = {"name": self.name, "id": self.element_id}
        if self.data is not None:
            content["data"] = self.data
        return {
            MIME: content,
            "text/html": self.html(scripts=True),
            "text/plain": FIGURES[self.name].fallback,
        }


def explorable(name: str, *, element_id: str | None = None, data: Any = None) -> Explorable:
    """An explorable of the book, for a cell's output: drawn on the site and in JupyterLab.

    Args:
        name: one of :data:`FIGURES` (``"heads"``, ``"online-softmax"``, ``"kv-cache"``,
            ``"latent-cache"``, ``"induction-heads"``, ``"live-minilm"``).
        element_id: the ``id`` of its element (default ``"explore-<name>"``).
        data: the figure's data, a dict that JSON can write, for a figure that needs it
            (``"induction-heads"``: :func:`mha.display.live_decoder.decoder_data`); ``None``
            for the others.

    Returns:
        An object that a notebook displays as the figure.

    Raises:
        ValueError: if ``name`` is not an explorable of the book, or ``data`` is missing for
            a figure that needs it or given to one that does not.
        TypeError: if ``element_id`` is neither a str nor ``None``, or ``data`` is not a
            dict.
    """
    arguments.choice("name", name, sorted(FIGURES))
    if element_id is not None:
        arguments.text("element_id", element_id)
    if data is not None and not isinstance(data, dict):
        raise TypeError(f"data must be a dict or None; got {arguments.describe(data)}")
    if FIGURES[name].needs_data != (data is not None):
        need = "needs data" if FIGURES[name].needs_data else "takes no data"
        got = "None" if data is None else "a dict"
        raise ValueError(f"the figure {name!r} {need}; got data={got}")
    live = served_live_files() if name == "live-minilm" else None
    return Explorable(name, element_id or f"explore-{name}", live, data)


def _data_script(data: Any) -> str:
    """A figure's data as JSON in its element (``""`` for none), safe inside ``<script>``."""
    if data is None:
        return ""
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" class="mha-explore-data">{text}</script>'


def _script(name: str) -> str:
    """A script of ``book/_static``, safe inside ``<script>`` (no ``</`` closes it early)."""
    path = STATIC / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the explorables need the book's source tree (book/_static)"
        )
    return path.read_text(encoding="utf8").replace("</", "<\\/")


def served_live_files(folder: Path = LIVE_DIR) -> LiveFiles | None:
    """The live model's files as the running Jupyter server serves them, or ``None``.

    ``None`` when they are not built (``make book`` builds them) or no running Jupyter
    server serves the folder they are in.

    Args:
        folder: the folder of ``manifest.json`` and the files it names.

    Returns:
        Their sizes and URL, or ``None``.

    Raises:
        TypeError: if ``folder`` is not a path.
    """
    manifest = arguments.path("folder", folder) / "manifest.json"
    if not manifest.is_file():
        return None
    base = _files_url(folder)
    if base is None:
        return None
    return LiveFiles.from_manifest(json.loads(manifest.read_text(encoding="utf8")), base)


def _files_url(folder: Path) -> str | None:
    """The URL path at which a running Jupyter server serves ``folder`` (its ``files/``
    handler, under the server's root), ending in ``/``; ``None`` if none serves it."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    folder = folder.resolve()
    for server in list_running_servers():
        root = Path(server.get("root_dir") or server.get("notebook_dir") or "").resolve()
        if root == folder or root in folder.parents:
            relative = folder.relative_to(root).as_posix()
            base = server.get("base_url", "/")
            return f"{base}files/{relative}/" if relative != "." else f"{base}files/"
    return None


__all__ = [
    "FIGURES",
    "MIME",
    "Explorable",
    "Figure",
    "LiveFiles",
    "explorable",
    "megabytes",
    "served_live_files",
]
