"""Live figures in the published book: every state drawn at build time, HTML controls.

A live figure's display carries, next to its PNG snapshot, a small JSON of the mime type
:data:`attnlab.widgets.core.LIVE_MIME` (its registry name, controls and default state).
This module is a myst-nb mime renderer (entry point ``myst_nb.mime_renderers`` in
``pyproject.toml``), ranked first for the HTML builders only. For that JSON it makes the
figure again from :data:`attnlab.widgets.WIDGETS`, renders every state with the pure
:func:`attnlab.widgets.core.render` and returns

- one raw HTML block of controls of the same kind, label and order as the live ones
  (a range slider, toggle buttons, a select, a checkbox), each with an accessible name;
- one Sphinx image node per state (so Sphinx copies the files), all hidden but the
  default state's, and those with ``loading="lazy"``: a reader's browser fetches a state's
  picture only when the controls show it. Each has an alt text: the default state's is
  the cell's ``mystnb.image.alt`` (the figure's finding, as the chapter states it), every
  other state's names the figure and the state (``softmax の鋭さ（d_k 4、…）``).

``_static/attnlab-live.js`` (the project's own, no CDN) switches the images when a control
moves and tells a screen reader the new state's alt text (a polite live region). Other
builders, Colab and a notebook opened without running show the PNG; in a kernel the widget
stays live. A figure with more than :data:`MAX_STATES` states fails the
build with a message naming it.

Not taught: machinery of the book's build (CONTRIBUTING.md).
"""

from __future__ import annotations

import hashlib
import html
import json
from typing import Any

from attnlab.widgets.core import LIVE_MIME

#: The most states a live figure may have (all are drawn into the page).
MAX_STATES = 200

#: Classes the JavaScript and the stylesheet look for.
CONTAINER_CLASS = "attnlab-live"
STATE_CLASS = "attnlab-live-state"
HIDDEN_CLASS = "attnlab-live-hidden"

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

    Not taught: machinery of the book's build.
    """
    esc = html.escape
    title = esc(description["title"])
    parts = [f'<div class="attnlab-live-controls" role="group" aria-label="{title} の操作" '
             f'data-figure="{esc(description["figure"])}">']
    for number, control in enumerate(description["controls"]):
        cid = f"{prefix}-c{number}"
        label, labels, default = esc(control["label"]), control["labels"], control["default"]
        data = (f'data-name="{esc(control["name"])}" data-count="{len(labels)}" '
                f'data-default="{default}"')
        kind = control["kind"]
        if kind == "slider":
            values = esc(json.dumps(labels, ensure_ascii=False))
            parts.append(
                f'<div class="attnlab-live-control" data-kind="slider" {data}>'
                f'<label for="{cid}">{label}</label>'
                f'<input type="range" id="{cid}" min="0" max="{len(labels) - 1}" step="1" '
                f'value="{default}" aria-valuetext="{esc(labels[default])}" '
                f'data-labels="{values}">'
                f'<output for="{cid}" aria-hidden="true">{esc(labels[default])}</output></div>')
        elif kind == "toggle":
            buttons = "".join(
                f'<button type="button" data-index="{i}" '
                f'aria-pressed="{"true" if i == default else "false"}">{esc(text)}</button>'
                for i, text in enumerate(labels))
            parts.append(
                f'<div class="attnlab-live-control" data-kind="toggle" {data}>'
                f'<span class="attnlab-live-label" id="{cid}">{label}</span>'
                f'<span role="group" aria-labelledby="{cid}">{buttons}</span></div>')
        elif kind == "dropdown":
            options = "".join(
                f'<option value="{i}"{" selected" if i == default else ""}>{esc(text)}</option>'
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


def live_figure_nodes(renderer, description: dict[str, Any], prefix: str,
                      default_alt: str = "") -> list:
    """The docutils nodes of a live figure: its controls and one image node per state.

    ``default_alt`` (the cell's ``mystnb.image.alt``) is the default state's alt text;
    without it, and for every other state, the alt names the figure and the state.

    Not taught: machinery of the book's build.
    """
    from docutils import nodes

    from attnlab.plotting import figure_to_png
    from attnlab.widgets.core import render

    figure, states = figure_states(description)
    default = tuple(control["default"] for control in description["controls"])
    container = nodes.container(classes=[CONTAINER_CLASS])
    container.append(nodes.raw("", controls_html(description, prefix), format="html"))
    images = nodes.container(classes=["attnlab-live-images"])
    for number, state in enumerate(states):
        png = figure_to_png(render(figure.plot, **state))
        filename = f"{hashlib.sha256(png).hexdigest()}.png"
        uri = renderer.write_file([filename], png, overwrite=False, exists_ok=True)
        indices = _indices(description, number)
        alt = f"{description['title']}（{state_label(description, indices)}）"
        if indices == default and default_alt:
            alt = default_alt
        image = nodes.image(uri=uri, alt=alt)
        image["classes"] += [STATE_CLASS] + ([] if indices == default else [HIDDEN_CLASS])
        if indices != default:  # fetched only when shown: the page loads one picture
            image["loading"] = "lazy"
        images.append(image)
    container.append(images)
    return [container]


class LiveFigureRenderer:
    """myst-nb mime renderer for :data:`LIVE_MIME`, first for the HTML builders only.

    Not taught: machinery of the book's build.
    """

    mime_priority_overrides = [(builder, LIVE_MIME, 1) for builder in HTML_BUILDERS]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if data.mime_type != LIVE_MIME or inline:
            return None
        content = data.content
        description = json.loads(content) if isinstance(content, str | bytes) else content
        prefix = f"attnlab-live-{data.cell_index}-{data.output_index}"
        metadata = getattr(data, "cell_metadata", None) or {}
        alt = str(metadata.get("mystnb", {}).get("image", {}).get("alt", "")).strip()
        try:
            return live_figure_nodes(renderer, dict(description), prefix, alt)
        except LiveFigureError as err:
            from sphinx.errors import ExtensionError

            raise ExtensionError(f"{renderer.document['source']}: {err}") from None
