"""Live figures in the published book (attnlab.live_book): the JSON, the controls, the states."""

import io
import json
from html.parser import HTMLParser
from types import SimpleNamespace

import nbformat
import pytest
from PIL import Image

from attnlab import live_book
from attnlab.widgets import WIDGETS, control_values
from attnlab.widgets.core import LIVE_HINT, LIVE_MIME, LIVE_NOTE, OUTPUT_MARKER
from scripts.book import all_notebooks

NAMES = sorted(WIDGETS)


@pytest.fixture(scope="module", params=NAMES)
def figure(request):
    return WIDGETS[request.param]()


@pytest.mark.slow
def test_every_registered_figure_describes_itself(figure):
    description = figure.describe()
    assert description["figure"] == figure.name and description["title"] == figure.title
    assert [c["name"] for c in description["controls"]] == list(figure.controls)
    for control, widget in zip(description["controls"], figure.controls.values(), strict=True):
        values = control_values(widget)
        assert len(control["labels"]) == len(values)
        assert values[control["default"]] == widget.value
        assert control["kind"] in ("slider", "toggle", "dropdown", "checkbox")
        assert control["label"]
    assert json.loads(json.dumps(description)) == description  # plain JSON
    assert len(json.dumps(description, ensure_ascii=False).encode()) < 4096


def test_the_display_carries_the_json_next_to_the_png(figure):
    data, metadata = figure._repr_mimebundle_()
    assert data[LIVE_MIME] == figure.describe() and "image/png" in data
    assert metadata == {OUTPUT_MARKER: True}


def test_a_figure_made_with_arguments_has_no_json():
    factory = WIDGETS[NAMES[0]]
    made = factory.__wrapped__()  # as if not made by the registered factory
    assert made.describe() is None and LIVE_MIME not in made._repr_mimebundle_()[0]


def test_states_are_in_page_order(figure):
    description = figure.describe()
    again, states = live_book.figure_states(description)
    assert states == list(figure.states()) and len(states) <= live_book.MAX_STATES
    counts = [len(c["labels"]) for c in description["controls"]]
    for number, state in enumerate(states):
        indices = live_book._indices(description, number)
        assert all(0 <= i < n for i, n in zip(indices, counts, strict=True))
        values = [control_values(again.controls[c["name"]])[i]
                  for c, i in zip(description["controls"], indices, strict=True)]
        assert list(state.values()) == values


class _Controls(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.labels_for, self.ids = [], set(), set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "label":
            self.labels_for.add(attrs.get("for"))
        if "id" in attrs:
            self.ids.add(attrs["id"])


def test_controls_have_the_live_kinds_and_accessible_names(figure):
    description = figure.describe()
    parser = _Controls()
    parser.feed(live_book.controls_html(description, "p"))
    controls = [a for t, a in parser.tags
                if "attnlab-live-control" in a.get("class", "").split()]
    assert [a["data-kind"] for a in controls] == [c["kind"] for c in description["controls"]]
    for tag, attrs in parser.tags:
        if tag in ("input", "select"):  # every form control is named by a <label for=…>
            assert attrs["id"] in parser.labels_for
        if tag == "span" and attrs.get("role") == "group":
            assert attrs["aria-labelledby"] in parser.ids
    buttons = [a for t, a in parser.tags if t == "button"]
    toggles = [c for c in description["controls"] if c["kind"] == "toggle"]
    assert len(buttons) == sum(len(c["labels"]) for c in toggles)
    assert sum(a["aria-pressed"] == "true" for a in buttons) == len(toggles)


def test_too_many_states_fail_with_the_figures_name(monkeypatch):
    def too_big():  # a stand-in figure: 21 × 11 = 231 states
        return SimpleNamespace(controls={"a": None, "b": None}, title="大きな図",
                               states=lambda: iter(range(21 * 11)))

    monkeypatch.setitem(WIDGETS, "too_big", too_big)
    description = {"figure": "too_big", "controls": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(live_book.LiveFigureError, match="too_big.*231 個"):
        live_book.figure_states(description)
    with pytest.raises(live_book.LiveFigureError, match="WIDGETS にありません"):
        live_book.figure_states({"figure": "missing", "controls": []})
    changed = {"figure": "too_big", "controls": [{"name": "b"}, {"name": "a"}]}
    with pytest.raises(live_book.LiveFigureError, match="make notebooks"):
        live_book.figure_states(changed)


def test_the_renderer_takes_only_its_mime_types_and_only_for_html():
    renderer = live_book.LiveFigureRenderer
    other = SimpleNamespace(mime_type="text/plain", content="")
    plain_png = SimpleNamespace(mime_type="image/png", content="", output_metadata={})
    assert renderer.handle_mime(None, other, False) is None
    assert renderer.handle_mime(None, plain_png, False) is None  # myst-nb's own image
    assert {b for b, mime, p in renderer.mime_priority_overrides} == set(live_book.HTML_BUILDERS)
    assert all(mime == LIVE_MIME and p < 50 for b, mime, p in renderer.mime_priority_overrides)


class _Renderer:
    """What the mime renderer uses of myst-nb's: the document and write_file."""

    def __init__(self):
        self.document = {"source": "test"}
        self.written = {}

    def write_file(self, path, content, overwrite=False, exists_ok=False):
        self.written[path[0]] = content
        return f"_images/{path[0]}"


def test_the_renderer_returns_a_light_and_a_dark_image_per_state_and_controls(
        tmp_path, monkeypatch, small):
    from attnlab.plotting import PNG_SCALE

    monkeypatch.setattr(live_book, "CACHE", tmp_path / "cache")
    renderer = _Renderer()
    description = small().describe()
    data = SimpleNamespace(mime_type=LIVE_MIME, content=description, cell_index=3,
                           output_index=0)
    (container,) = live_book.LiveFigureRenderer.handle_mime(renderer, data, False)
    raw, light, dark, note = container.children
    assert note.astext() == LIVE_NOTE and live_book.NOTE_CLASS in note["classes"]
    assert "attnlab-live-3-0-c0" in raw.astext()
    assert "attnlab-light" in light["classes"] and "attnlab-dark" in dark["classes"]
    states = list(small().states())
    assert len(light.children) == len(dark.children) == len(states)
    shown = [i for i, img in enumerate(light.children)
             if live_book.HIDDEN_CLASS not in img["classes"]]
    assert len(shown) == 1 and shown == [i for i, img in enumerate(dark.children)
                                         if live_book.HIDDEN_CLASS not in img["classes"]]
    for number, (day, night) in enumerate(zip(light.children, dark.children, strict=True)):
        assert day["alt"] == night["alt"] and day["alt"].startswith(description["title"])
        assert day["width"] == night["width"]
        assert "no-scaled-link" in day["classes"]  # no link around it to the file
        assert night["loading"] == "lazy"  # fetched on a dark page only
        assert ("loading" in day) == (number not in shown)  # the default loads at once
    default = light.children[shown[0]]
    pixels = Image.open(io.BytesIO(renderer.written[default["uri"].split("/")[-1]])).size
    # the PNG's own size, unrounded: the page reserves its exact aspect ratio (issue 48)
    assert default["width"] == f"{pixels[0] / PNG_SCALE:g}px"
    assert default["height"] == f"{pixels[1] / PNG_SCALE:g}px"
    assert len(renderer.written) == 2 * len(states)  # every state two different pictures
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 2 * len(states)

    # the page's second live figure has no note; drawn again, it reads the cache
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    data.cell_index = 5
    (again,) = live_book.LiveFigureRenderer.handle_mime(renderer, data, False)
    assert len(again.children) == 3  # controls and pictures, no note
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == before


def test_a_notebook_figure_with_its_dark_version_becomes_two_images(monkeypatch):
    import base64

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from attnlab.plotting import BOOK_OUTPUTS_ENV, DARK_PNG_KEY, figure_pngs

    monkeypatch.setenv(BOOK_OUTPUTS_ENV, "1")  # as make notebooks runs a chapter
    fig = Figure()
    fig.subplots().plot([0, 1])
    light_b64, metadata = figure_pngs(fig)
    renderer = _Renderer()
    made = []

    def render_image(data):  # myst-nb's: an image node with the cell's alt and the size
        from docutils import nodes

        made.append(data)
        return [nodes.image(uri="_images/light.png", alt="説明", width="340", classes=[])]

    renderer.render_image = render_image
    data = SimpleNamespace(mime_type="image/png", content=light_b64,
                           output_metadata={"image/png": metadata})
    light, dark = live_book.LiveFigureRenderer.handle_mime(renderer, data, False)
    assert made == [data]
    assert "attnlab-light" in light["classes"] and "attnlab-dark" in dark["classes"]
    assert live_book.FIGURE_CLASS in light["classes"] + dark["classes"]
    # shown at half the PNG's pixels, unrounded (its exact aspect ratio, issue 48)
    pixels = Image.open(io.BytesIO(base64.b64decode(light_b64))).size
    assert light["width"] == f"{pixels[0] / 2:g}px" and light["height"] == f"{pixels[1] / 2:g}px"
    assert (dark["alt"], dark["width"], dark["height"]) == ("説明", light["width"],
                                                            light["height"])
    assert dark["loading"] == "lazy"
    (written,) = renderer.written.values()
    assert written == base64.b64decode(metadata[DARK_PNG_KEY])


def test_live_figure_captions_lose_the_hint_the_page_says_once():
    from docutils import nodes

    assert live_book.strip_live_hint("図の説明。" + LIVE_HINT) == "図の説明。"
    assert live_book.strip_live_hint("図の説明。") == "図の説明。"

    def figure(live: bool) -> nodes.figure:
        content = nodes.container(classes=[live_book.CONTAINER_CLASS] if live else [])
        caption = nodes.caption("", "", nodes.strong("", "d_k"),
                                nodes.Text("を変える。" + LIVE_HINT))
        return nodes.figure("", content, caption)

    document = nodes.section("", figure(True), figure(False))
    live_book._live_figure_captions(document)
    live, other = document.children
    assert live[1].astext() == "d_kを変える。"
    assert other[1].astext().endswith(LIVE_HINT)  # not a live figure: left alone


def test_committed_notebooks_store_one_png_per_live_figure():
    """The states are drawn at build time; a notebook holds its snapshot and the small JSON."""
    for path in all_notebooks():
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                if not output.get("metadata", {}).get(OUTPUT_MARKER):
                    continue
                data = output["data"]
                assert LIVE_MIME in data, f"{path.name}: ライブ図の JSON がありません"
                pngs = [k for k in data if k.startswith("image/")]
                assert pngs == ["image/png"], path.name
                assert len(json.dumps(data[LIVE_MIME]).encode()) < 4096, path.name


@pytest.mark.parametrize(("text", "html_text"), [
    ("d_k", "<i>d</i><sub>k</sub>"),
    ("√d_k で割る", "√<i>d</i><sub>k</sub> で割る"),
    ("d_model と W_O", "<i>d</i><sub>model</sub> と <i>W</i><sub>O</sub>"),
    ("キーの位置 n", "キーの位置 n"),
    ("a<b", "a&lt;b"),
])
def test_control_labels_write_symbols_as_the_book_does(text, html_text):
    assert live_book.symbols_html(text) == html_text


def _notebook_with(tmp_path, descriptions):
    """A notebook whose outputs carry the live figures ``descriptions`` (as committed)."""
    nb = nbformat.v4.new_notebook()
    for description in descriptions:
        cell = nbformat.v4.new_code_cell("figure")
        cell.outputs = [nbformat.v4.new_output(
            "display_data", data={"text/plain": "図", LIVE_MIME: description},
            metadata={OUTPUT_MARKER: True})]
        nb.cells.append(cell)
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    return path


def test_every_live_figure_of_the_book_is_found_in_the_committed_outputs():
    from scripts.book import chapter_notebooks

    found = live_book.live_descriptions(chapter_notebooks())
    assert sorted(d["figure"] for d in found) == NAMES  # each once, none left out


@pytest.mark.slow
def test_states_drawn_before_the_build_are_the_builds_bytes(tmp_path, monkeypatch, small):
    """draw_live_states (a process pool) writes each state's pictures where the build
    looks for them, byte for byte what the build itself draws; the build then draws none."""
    monkeypatch.setattr(live_book, "CACHE", tmp_path / "cache")
    description = small().describe()
    path = _notebook_with(tmp_path, [description, description])  # shown twice, drawn once
    states = list(small().states())
    assert live_book.draw_live_states([path], jobs=2, chunk=4) == (len(states), len(states))
    assert len(list((tmp_path / "cache").iterdir())) == 2 * len(states)  # no partial file
    source, figure = live_book._source_key(), small()
    for number, state in enumerate(states):
        key = live_book.state_key(description["figure"], number, source)
        cached = [p.read_bytes() for p in live_book._cache_paths(key)]
        assert cached == list(live_book.state_pngs(figure, state))  # drawn here
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    assert live_book.draw_live_states([path], jobs=2) == (0, len(states))
    data = SimpleNamespace(mime_type=LIVE_MIME, content=description, cell_index=0,
                           output_index=0)
    live_book.LiveFigureRenderer.handle_mime(_Renderer(), data, False)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == before


def test_a_figure_the_build_cannot_show_is_left_to_the_build(tmp_path, monkeypatch, small):
    monkeypatch.setattr(live_book, "CACHE", tmp_path / "cache")
    description = small().describe()
    unknown = {**description, "figure": "missing"}
    changed = {**description, "controls": description["controls"][::-1]}
    path = _notebook_with(tmp_path, [unknown, changed])
    drawn, total = live_book.draw_live_states([path], jobs=1)
    assert drawn == 0 and not (tmp_path / "cache").exists()


def test_a_drawn_state_is_read_only_under_the_key_of_the_code_that_drew_it(tmp_path, monkeypatch):
    """A cached picture is never reused after a change of the code that draws it: any module
    of attnlab, or state_pngs; placing the pictures (the rest of live_book) is not drawing."""
    import shutil
    from pathlib import Path

    import attnlab

    package = tmp_path / "attnlab"
    shutil.copytree(Path(attnlab.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    key = live_book._source_key(package)
    assert key == live_book._source_key()  # the same code, the same key
    widget = package / "widgets" / "rope.py"
    code = widget.read_text(encoding="utf-8")
    widget.write_text(code + "\n_LIMIT = 1.7\n", encoding="utf-8")  # a change, not a new picture
    assert live_book._source_key(package) != key
    widget.write_text(code, encoding="utf-8")
    assert live_book._source_key(package) == key
    placing = package / "live_book.py"
    placing.write_text(placing.read_text(encoding="utf-8") + "\n# placing only\n",
                       encoding="utf-8")
    assert live_book._source_key(package) == key

    def state_pngs(figure, state, key=None):  # other drawing code in live_book
        return b"", b""

    monkeypatch.setattr(live_book, "state_pngs", state_pngs)
    assert live_book._source_key(package) != key


def test_the_light_picture_a_test_draws_is_the_builds(tmp_path, monkeypatch, small):
    """state_light_png (what tests/test_widgets.py compares a live update with) keeps the
    bytes state_pngs draws; the build then draws the state's pair, the same light bytes."""
    monkeypatch.setattr(live_book, "CACHE", tmp_path / "cache")
    figure, source = small(), live_book._source_key()
    state = list(figure.states())[1]
    key = live_book.state_key(figure.name, 1, source)
    light = live_book.state_light_png(figure, state, key)
    assert light == live_book.state_pngs(figure, state)[0]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"{key}-light.png"]
    assert live_book.state_light_png(figure, state, key) == light  # read, not drawn
    assert live_book.state_pngs(figure, state, key)[0] == light
    assert len(list((tmp_path / "cache").iterdir())) == 2
