"""Live figures in the published book: every state drawn at build time, HTML controls.

A live figure's display carries, next to its PNG snapshot, a small JSON of the mime type
:data:`attnlab.widgets.core.LIVE_MIME` (its registry name, controls and default state).
This module is a myst-nb mime renderer (entry point ``myst_nb.mime_renderers`` in
``pyproject.toml``), ranked first for the HTML builders only. For that JSON it makes the
figure again from :data:`attnlab.widgets.WIDGETS`, renders every state with the pure
:func:`attnlab.widgets.core.render` and returns

- one raw HTML block of controls of the same kind, label and order as the live ones
  (a range slider, toggle buttons, a select, a checkbox), each with an accessible name;
- two blocks of Sphinx image nodes (so Sphinx copies the files), one Sphinx image per
  state in each, all hidden but the default state's: the figure as drawn for a light
  page, and its dark version (:func:`attnlab.plotting.dark_colours`); the classes
  ``attnlab-light`` and ``attnlab-dark`` show one block (``_static/attnlab-typography.css``;
  not the theme's ``only-light`` / ``only-dark``, which also hide a following caption).
  Both are drawn at :data:`attnlab.plotting.PNG_SCALE` times the figure's resolution and
  shown at the figure's size. All but the default state's light picture have
  ``loading="lazy"``: a reader's browser fetches a state's picture only when the controls
  show it. Each has an alt text: the default state's is the cell's ``mystnb.image.alt``
  (the figure's finding, as the chapter states it), every other state's names the figure
  and the state (``softmax の鋭さ（d_k 4、…）``).

The first live figure of a page also ends with :data:`attnlab.widgets.core.LIVE_NOTE`, the
note on Binder and Colab, so that a page says it once; a post-transform
(:func:`live_figure_captions_transform`, registered by ``book_ext/book_fixes.py``) removes
the same note from the captions of live figures that still end with it
(:data:`attnlab.widgets.LIVE_HINT`).

The same renderer shows a notebook's pyplot figure that carries its dark version (output
metadata :data:`attnlab.plotting.DARK_PNG_KEY`, written by the book's figure style when
``make notebooks`` stores the outputs: :data:`attnlab.plotting.BOOK_OUTPUTS_ENV`) as two
images, one per page colour.

``_static/attnlab-live.js`` (the project's own, no CDN) switches the images when a control
moves and tells a screen reader the new state's alt text (a polite live region). Other
builders, Colab and a notebook opened without running show the PNG; in a kernel the widget
stays live. A figure with more than :data:`MAX_STATES` states fails the
build with a message naming it. Drawn states are kept in :data:`CACHE`, keyed by the code
that draws them (:func:`_source_key`: ``attnlab``'s modules, :func:`state_pngs`,
:func:`state_light_png` and the versions of the libraries that draw), so a second build
draws nothing again and a picture drawn by other code is never read.
``tests/test_widgets.py`` compares each live update with the light picture of the same
state from the same cache (``make test`` draws every state there first: ``make
live-states``), so no state's pure render is drawn twice.
Sphinx reads one page at a time; ``make book`` and ``make build`` therefore draw every
state first, on every core (:func:`draw_live_states`, ``scripts/live_states.py``), and the
renderer only reads the pictures. Drawing a state costs a new figure (``plot``, about a
fifth), two full draws at :data:`attnlab.plotting.PNG_SCALE` (light and dark, about
two thirds) and two PNG encodings; a figure reused from state to state would be cheaper but
does not give the same bytes for every figure, so each state is drawn from a new one.

Not taught: machinery of the book's build (src/attnlab/README.md).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from attnlab.widgets.core import (  # symbols_html: the live figures' labels typeset the same way
    LIVE_HINT,
    LIVE_MIME,
    LIVE_NOTE,
    symbols_html,
    symbols_unicode,
)

#: The most states a live figure may have (all are drawn into the page).
MAX_STATES = 200

#: Classes the JavaScript and the stylesheet look for.
CONTAINER_CLASS = "attnlab-live"
STATE_CLASS = "attnlab-live-state"
HIDDEN_CLASS = "attnlab-live-hidden"
NOTE_CLASS = "attnlab-live-note"
#: Every figure image the book's style drew (the stylesheet keeps the theme's dark-mode
#: panel and filter off them; ``dark-light`` tells the theme the same; ``no-scaled-link``
#: keeps Sphinx from wrapping a sized image in a link to its file), and the classes that
#: show a picture on a light or a dark page only (``_static/attnlab-typography.css``).
FIGURE_CLASS = "attnlab-figure"
THEME_READY_CLASS = "dark-light"
NO_LINK_CLASS = "no-scaled-link"
LIGHT_CLASS, DARK_CLASS = "attnlab-light", "attnlab-dark"

#: Where drawn states are kept between builds (``make clean`` removes it).
CACHE = Path("_build") / ".attnlab-live-cache"

HTML_BUILDERS = ("html", "dirhtml", "singlehtml")


class LiveFigureError(Exception):
    """A live figure the book cannot show (too many states, unknown name).

    Not taught: machinery of the book's build.
    """


def figure_states(description: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The figure a description names, made again, and every state in page order.

    The order is :meth:`InteractiveFigure.states`: the first control varies slowest, so
    the state with control indices (i_0, …, i_n) is number Σ i_k · Π_{l>k} count_l.

    Raises
    ------
    LiveFigureError
        For an unknown figure, controls that differ from the description's, or more than
        :data:`MAX_STATES` states.

    Not taught: machinery of the book's build.
    """
    from attnlab.widgets import WIDGETS

    name = description.get("figure")
    if name not in WIDGETS:
        raise LiveFigureError(f"ライブ図 {name!r} は attnlab.widgets.WIDGETS にありません")
    figure = WIDGETS[name]()
    names = [control["name"] for control in description["controls"]]
    if names != list(figure.controls):
        raise LiveFigureError(
            f"ライブ図 {name!r} のコントロール {names} が、いまの {list(figure.controls)} と"
            "違います。ノートブックを実行し直してください（make notebooks）")
    states = list(figure.states())
    if len(states) > MAX_STATES:
        raise LiveFigureError(
            f"ライブ図 {name!r}（{figure.title}）の状態は {len(states)} 個です。本の中で動かせる"
            f"のは {MAX_STATES} 個までです。コントロールの値域を小さくしてください")
    return figure, states


def state_label(description: dict[str, Any], indices: tuple[int, ...]) -> str:
    """Japanese description of one state, e.g. ``d_k 256、スケーリング 割らない``.

    Not taught: machinery of the book's build.
    """
    return "、".join(f"{control['label']} {control['labels'][index]}"
                    for control, index in zip(description["controls"], indices, strict=True))


def _indices(description: dict[str, Any], number: int) -> tuple[int, ...]:
    counts = [len(control["labels"]) for control in description["controls"]]
    out = []
    for count in reversed(counts):
        out.append(number % count)
        number //= count
    return tuple(reversed(out))


def controls_html(description: dict[str, Any], prefix: str) -> str:
    """The HTML controls of a figure (same kind, label and order as the live ones).

    Labels and values show their symbols as the book writes them (:func:`symbols_html`);
    where only text can go (a menu's option, a slider's value once moved) in Unicode
    subscripts (:func:`attnlab.widgets.core.symbols_unicode`), as in JupyterLab.

    Not taught: machinery of the book's build.
    """
    esc = html.escape
    title = esc(description["title"])
    parts = [f'<div class="attnlab-live-controls" role="group" aria-label="{title} の操作" '
             f'data-figure="{esc(description["figure"])}">']
    for number, control in enumerate(description["controls"]):
        cid = f"{prefix}-c{number}"
        label = symbols_html(control["label"])
        labels, default = control["labels"], control["default"]
        data = (f'data-name="{esc(control["name"])}" data-count="{len(labels)}" '
                f'data-default="{default}"')
        kind = control["kind"]
        if kind == "slider":
            # the JavaScript writes a moved slider's value as text: Unicode subscripts
            values = esc(json.dumps([symbols_unicode(text) for text in labels],
                                    ensure_ascii=False))
            parts.append(
                f'<div class="attnlab-live-control" data-kind="slider" {data}>'
                f'<label for="{cid}">{label}</label>'
                f'<input type="range" id="{cid}" min="0" max="{len(labels) - 1}" step="1" '
                f'value="{default}" aria-valuetext="{esc(symbols_unicode(labels[default]))}" '
                f'data-labels="{values}">'
                f'<output for="{cid}" aria-hidden="true">{symbols_html(labels[default])}'
                '</output></div>')
        elif kind == "toggle":
            buttons = "".join(
                f'<button type="button" data-index="{i}" '
                f'aria-pressed="{"true" if i == default else "false"}">{symbols_html(text)}'
                '</button>'
                for i, text in enumerate(labels))
            parts.append(
                f'<div class="attnlab-live-control" data-kind="toggle" {data}>'
                f'<span class="attnlab-live-label" id="{cid}">{label}</span>'
                f'<span role="group" aria-labelledby="{cid}">{buttons}</span></div>')
        elif kind == "dropdown":
            options = "".join(
                f'<option value="{i}"{" selected" if i == default else ""}>'
                f'{esc(symbols_unicode(text))}</option>'
                for i, text in enumerate(labels))
            parts.append(
                f'<div class="attnlab-live-control" data-kind="dropdown" {data}>'
                f'<label for="{cid}">{label}</label><select id="{cid}">{options}</select></div>')
        else:  # checkbox: labels are (off, on)
            checked = " checked" if default == 1 else ""
            parts.append(
                f'<div class="attnlab-live-control" data-kind="checkbox" {data}>'
                f'<input type="checkbox" id="{cid}"{checked}>'
                f'<label for="{cid}">{label}</label></div>')
    parts.append("</div>")
    return "".join(parts)


def _source_key(package: Path | None = None) -> str:
    """A digest of everything a live figure's picture depends on: the code of ``package``
    (attnlab's folder) but this module, which only places the pictures, with the
    functions of this module that draw and keep them (:func:`state_pngs`,
    :func:`state_light_png`), and the versions of
    the libraries that draw (matplotlib, Pillow) or make the figure (numpy, ipywidgets).
    A cached picture is read only under the key of the code that drew it."""
    import inspect

    import ipywidgets
    import matplotlib
    import numpy
    import PIL

    import attnlab

    package = Path(attnlab.__file__).parent if package is None else Path(package)
    versions = (matplotlib.__version__, PIL.__version__, numpy.__version__,
                ipywidgets.__version__)
    digest = hashlib.sha256(" ".join(versions).encode())
    for drawing in (state_pngs, _keep, state_light_png):
        digest.update(inspect.getsource(drawing).encode())
    for path in sorted(package.rglob("*.py")):
        if path != package / Path(__file__).name:  # placing, not drawing
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def state_key(name: str, number: int, source: str) -> str:
    """The name of a state's pictures in :data:`CACHE`: the figure's registry name, the
    state's number (page order) and :func:`_source_key`.

    Not taught: machinery of the book's build.
    """
    return f"{name}-{number}-{source}"


def _cache_paths(key: str) -> list[Path]:
    return [CACHE / f"{key}-{variant}.png" for variant in ("light", "dark")]


def state_pngs(figure, state: dict[str, Any], key: str | None = None) -> tuple[bytes, bytes]:
    """The light and dark PNG of one state (the pure render at the book's scale).

    With ``key`` (:func:`state_key`), the pictures are read from :data:`CACHE` when a
    build (or :func:`draw_live_states`) drew them before, and kept there. A file is
    written under a temporary name and then renamed: a process that reads the cache at
    the same time never sees half a picture.

    Not taught: machinery of the book's build.
    """
    from attnlab.plotting import PNG_SCALE, figure_to_png
    from attnlab.widgets.core import render

    paths = None
    if key is not None:
        paths = _cache_paths(key)
        if all(path.exists() for path in paths):
            return paths[0].read_bytes(), paths[1].read_bytes()
    fig = render(figure.plot, **state)
    light = figure_to_png(fig, scale=PNG_SCALE)
    dark = figure_to_png(fig, scale=PNG_SCALE, dark=True)
    if paths is not None:
        for path, png in zip(paths, (light, dark), strict=True):
            _keep(path, png)
    return light, dark


def _keep(path: Path, png: bytes) -> None:
    """Write a picture into the cache under a temporary name, then rename it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    partial.write_bytes(png)
    os.replace(partial, path)


def state_light_png(figure, state: dict[str, Any], key: str) -> bytes:
    """The light PNG of one state, the same bytes as :func:`state_pngs`'s: read from
    :data:`CACHE`, or drawn and kept there alone (the build draws the dark one with it
    later). What ``tests/test_widgets.py`` compares a live update with.

    Not taught: machinery of the book's build.
    """
    from attnlab.plotting import PNG_SCALE, figure_to_png
    from attnlab.widgets.core import render

    path = _cache_paths(key)[0]
    if path.exists():
        return path.read_bytes()
    light = figure_to_png(render(figure.plot, **state), scale=PNG_SCALE)
    _keep(path, light)
    return light


def live_descriptions(paths) -> list[dict[str, Any]]:
    """The description (:data:`LIVE_MIME`) of every live figure in the committed outputs
    of the notebooks ``paths``, in order, each figure once.

    Not taught: machinery of the book's build.
    """
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        notebook = json.loads(Path(path).read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            for output in cell.get("outputs", []):
                description = output.get("data", {}).get(LIVE_MIME)
                if isinstance(description, str):
                    description = json.loads(description)
                if isinstance(description, dict):
                    found.setdefault(json.dumps(description, sort_keys=True), description)
    return list(found.values())


def _state_count(description: dict[str, Any]) -> int:
    return math.prod(len(control["labels"]) for control in description["controls"])


#: The figures a process of :func:`draw_live_states` made (each made once per process).
_MADE: dict[str, tuple[Any, list[dict[str, Any]]]] = {}


def _draw(description: dict[str, Any], numbers: list[int], source: str) -> int:
    """Draw the states ``numbers`` of a figure into :data:`CACHE` (one task of the pool)."""
    name = json.dumps(description, sort_keys=True)
    if name not in _MADE:
        try:
            _MADE[name] = figure_states(description)
        except LiveFigureError:  # the build says so, naming the page
            return 0
    figure, states = _MADE[name]
    for number in numbers:
        state_pngs(figure, states[number], state_key(description["figure"], number, source))
    return len(numbers)


def draw_live_states(paths, jobs: int = 1, chunk: int = 16) -> tuple[int, int]:
    """Draw every state of every live figure of the notebooks ``paths`` into :data:`CACHE`
    before the book is built, ``jobs`` processes at once: the build then only reads them.

    The states are independent and each picture is a pure function of its state (the
    same bytes in any process), so they are drawn in tasks of ``chunk`` states of one
    figure on a process pool (``concurrent.futures``). States already in the cache are
    not drawn again. A figure the build cannot show (unknown name, other controls, more
    than :data:`MAX_STATES` states) is left to the build, which fails with its page's
    name. Returns how many states were drawn and how many the figures have.

    Not taught: machinery of the book's build.
    """
    source = _source_key()
    tasks, total = [], 0
    for description in live_descriptions(paths):
        count = _state_count(description)
        if count > MAX_STATES:
            continue
        total += count
        numbers = [number for number in range(count) if not all(
            path.exists() for path in _cache_paths(state_key(description["figure"], number,
                                                             source)))]
        tasks += [(description, numbers[start:start + chunk])
                  for start in range(0, len(numbers), chunk)]
    if not tasks:
        return 0, total
    if jobs <= 1:
        return sum(_draw(description, numbers, source) for description, numbers in tasks), total
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_draw, description, numbers, source)
                   for description, numbers in tasks]
        return sum(future.result() for future in futures), total


def shown_size(png: bytes) -> dict[str, str]:
    """The width and height a picture is shown at: half its pixels (:data:`PNG_SCALE`),
    unrounded, so that the aspect ratio the page reserves (``book_ext/book_fixes.py``
    turns the height into ``aspect-ratio``) is the PNG's own.

    Not taught: machinery of the book's build.
    """
    import io

    from PIL import Image

    from attnlab.plotting import PNG_SCALE

    width, height = Image.open(io.BytesIO(png)).size
    return {"width": f"{width / PNG_SCALE:g}px", "height": f"{height / PNG_SCALE:g}px"}


def _image(renderer, png: bytes, alt: str, classes: list[str], lazy: bool):
    """An image node for ``png`` (written once, by its digest), shown at the figure's size."""

    from docutils import nodes


    filename = f"{hashlib.sha256(png).hexdigest()}.png"
    uri = renderer.write_file([filename], png, overwrite=False, exists_ok=True)
    image = nodes.image(uri=uri, alt=alt, **shown_size(png))
    image["classes"] += classes
    if lazy:  # fetched only when shown: the page loads one picture
        image["loading"] = "lazy"
    return image


def live_figure_nodes(renderer, description: dict[str, Any], prefix: str,
                      default_alt: str = "", note: bool = False) -> list:
    """The docutils nodes of a live figure: its controls and its pictures, light and dark.

    The container holds the controls, then one block of images for a light page (one per
    state, all hidden but the default state's) and one for a dark page, in the same order;
    the classes :data:`LIGHT_CLASS` and :data:`DARK_CLASS` show one block. ``default_alt``
    (the cell's ``mystnb.image.alt``) is the default state's alt text; without it, and for
    every other state, the alt names the figure and the state. With ``note``, the figure
    ends with :data:`LIVE_NOTE` (the first live figure of a page).

    Not taught: machinery of the book's build.
    """
    from docutils import nodes

    figure, states = figure_states(description)
    source = _source_key()
    default = tuple(control["default"] for control in description["controls"])
    container = nodes.container(classes=[CONTAINER_CLASS])
    container.append(nodes.raw("", controls_html(description, prefix), format="html"))
    blocks = {LIGHT_CLASS: nodes.container(classes=["attnlab-live-images", LIGHT_CLASS]),
              DARK_CLASS: nodes.container(classes=["attnlab-live-images", DARK_CLASS])}
    for number, state in enumerate(states):
        pngs = state_pngs(figure, state, state_key(description["figure"], number, source))
        indices = _indices(description, number)
        alt = f"{description['title']}（{state_label(description, indices)}）"
        shown = indices == default
        if shown and default_alt:
            alt = default_alt
        for (theme, block), png in zip(blocks.items(), pngs, strict=True):
            classes = [STATE_CLASS, FIGURE_CLASS, THEME_READY_CLASS, NO_LINK_CLASS] + (
                [] if shown else [HIDDEN_CLASS])
            # fetched only when shown: the page loads one picture
            block += _image(renderer, png, alt, classes, lazy=not shown or theme == DARK_CLASS)
    container.extend(blocks.values())
    if note:
        container.append(nodes.paragraph("", LIVE_NOTE, classes=[NOTE_CLASS]))
    return [container]


def themed_image_nodes(renderer, data) -> list:
    """A notebook figure with its dark version: two images, one per page colour.

    The light one is myst-nb's own image node (alt text, size from the output metadata);
    the dark one has the same alt and size.

    Not taught: machinery of the book's build.
    """
    from attnlab.plotting import DARK_PNG_KEY

    (light,) = renderer.render_image(data)
    content = data.content
    for key, value in shown_size(base64.b64decode(content) if isinstance(content, str)
                                 else content).items():
        light[key] = value
    dark_png = base64.b64decode(data.output_metadata["image/png"][DARK_PNG_KEY])
    filename = f"{hashlib.sha256(dark_png).hexdigest()}.png"
    uri = renderer.write_file([filename], dark_png, overwrite=False, exists_ok=True)
    dark = light.deepcopy()
    dark["uri"] = uri
    shared = [FIGURE_CLASS, THEME_READY_CLASS, NO_LINK_CLASS]
    dark["classes"] = [*light["classes"], *shared, DARK_CLASS]
    dark["loading"] = "lazy"  # fetched only on a dark page
    light["classes"] += [*shared, LIGHT_CLASS]
    return [light, dark]


class LiveFigureRenderer:
    """myst-nb mime renderer for :data:`LIVE_MIME` (first for the HTML builders only), and
    for the PNG of a notebook figure that carries its dark version.

    Not taught: machinery of the book's build.
    """

    mime_priority_overrides = [(builder, LIVE_MIME, 1) for builder in HTML_BUILDERS]

    @staticmethod
    def handle_mime(renderer, data, inline):
        from attnlab.plotting import DARK_PNG_KEY

        if inline:
            return None
        if data.mime_type == "image/png":
            metadata = (getattr(data, "output_metadata", None) or {}).get("image/png", {})
            return themed_image_nodes(renderer, data) if DARK_PNG_KEY in metadata else None
        if data.mime_type != LIVE_MIME:
            return None
        content = data.content
        description = json.loads(content) if isinstance(content, str | bytes) else content
        prefix = f"attnlab-live-{data.cell_index}-{data.output_index}"
        metadata = getattr(data, "cell_metadata", None) or {}
        alt = str(metadata.get("mystnb", {}).get("image", {}).get("alt", "")).strip()
        # the page being read (myst-nb's element renderer holds the document's renderer)
        document = getattr(renderer, "renderer", renderer).document
        first = not document.get("attnlab_live_note")
        document["attnlab_live_note"] = True
        try:
            return live_figure_nodes(renderer, dict(description), prefix, alt, note=first)
        except LiveFigureError as err:
            from sphinx.errors import ExtensionError

            raise ExtensionError(f"{document['source']}: {err}") from None


def strip_live_hint(caption: str) -> str:
    """A live figure's caption without the trailing :data:`LIVE_HINT` the book says once.

    Not taught: machinery of the book's build.
    """
    return caption[: -len(LIVE_HINT)].rstrip() if caption.rstrip().endswith(LIVE_HINT) else caption


def _live_figure_captions(doctree) -> None:
    """Drop :data:`LIVE_HINT` from the captions of live figures (the page says it once)."""
    from docutils import nodes

    for figure in doctree.findall(nodes.figure):
        if not any(CONTAINER_CLASS in c["classes"] for c in figure.findall(nodes.container)):
            continue
        for caption in figure.findall(nodes.caption):
            texts = list(caption.findall(nodes.Text))
            if texts and texts[-1].rstrip().endswith(LIVE_HINT):
                last = texts[-1]
                last.parent.replace(last, nodes.Text(strip_live_hint(str(last))))


def live_figure_captions_transform():
    """The Sphinx post-transform that applies :func:`strip_live_hint` to every page.

    ``book_ext/book_fixes.py`` registers it (``app.add_post_transform``).

    Not taught: machinery of the book's build.
    """
    from sphinx.transforms.post_transforms import SphinxPostTransform

    class LiveFigureCaptions(SphinxPostTransform):
        default_priority = 900  # after myst-nb chose each output's mime type

        def run(self, **kwargs) -> None:
            _live_figure_captions(self.document)

    return LiveFigureCaptions
