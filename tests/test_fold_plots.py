"""The chapters fold their plotting-only code cells in the book (issue 48, m9):
``scripts/fold_plots.py`` tags them ``hide-input``; a chapter with one left unfolded fails."""

import json

import nbformat
import pytest

from scripts.fold_plots import PROMPT_SHOW, TAG, chapters, fold, plotting_only, unfolded

CHAPTERS = chapters()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_plotting_only_cell_is_folded(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    left = unfolded(nb)
    assert not left, (f"{path.name}: 図を描くだけのセル {left} が折りたたまれていません"
                      "（python -m scripts.fold_plots --fix）")


def _cell(source, tags=(), image=True, text=False):
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {})
    if image:
        cell.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": "AA=="}))
    if text:
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text="1\n"))
    return cell


def _nb(*cells):
    return json.loads(nbformat.writes(nbformat.v4.new_notebook(cells=list(cells))))


DRAW = ("fig, ax = plt.subplots()\nfor i, c in enumerate(colours):\n"
        "    ax.plot(x, color=c)\nplt.show()")


@pytest.mark.parametrize(("cells", "folded"), [
    # a figure whose names are never read again, or bound again first: folded
    ([_cell(DRAW), _cell("fig, ax = plt.subplots()\nax.plot(ax_data := [1])", image=True)],
     [0, 1]),
    ([_cell(DRAW), _cell("for i in range(3):\n    print(i)", image=False)], [0]),
    # a name the next cell reads is the chapter's: kept
    ([_cell("colours = [1, 2]\n" + DRAW), _cell("print(colours)", image=False)], []),
    ([_cell(DRAW), _cell("print([c for c in ax.lines])", image=False)], []),
    # a comprehension's own variable is not a read of the cell's name
    ([_cell(DRAW), _cell("print([i for i in range(2)])", image=False)], [0]),
    # checks, printed numbers, tables, exercises, live figures and no figure: kept
    ([_cell(DRAW + "\nassert len(colours) == 2")], []),
    ([_cell(DRAW + "\nprint(1)", text=True)], []),
    ([_cell(DRAW + "\ndisplay(ResultTable())")], []),
    ([_cell(DRAW, tags=["solution"])], []),
    ([_cell(DRAW, tags=["widget"])], []),
    ([_cell("x = 1", image=False)], []),
])
def test_what_counts_as_plotting_only(cells, folded):
    nb = _nb(*cells)
    assert [i for i in range(len(cells)) if plotting_only(nb["cells"], i)] == folded
    assert fold(nb) == folded
    for i in folded:
        metadata = nb["cells"][i]["metadata"]
        assert TAG in metadata["tags"] and metadata["mystnb"]["code_prompt_show"] == PROMPT_SHOW
    assert fold(nb) == [] and unfolded(nb) == []  # idempotent
