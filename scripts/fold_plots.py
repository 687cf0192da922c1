"""Fold the chapters' plotting-only code cells in the book (tag ``hide-input``).

Usage: python -m scripts.fold_plots [--fix] [NOTEBOOK ...]   (default: every chapter)

A reader of the book follows the argument from prose to figure; 20 lines of matplotlib in
between are a notebook's, not a book's (issue 48, m9). A code cell is *plotting-only* when

- it draws a figure (an ``image/png`` output) and prints or displays nothing else (no
  ``print``, ``display``, no text output);
- it checks nothing (no ``assert``: a check is part of the argument) and is no exercise,
  solution or live figure (tags ``solution``, ``widget``, ``colab-install``,
  ``remove-cell``);
- every name it binds at the top level (``fig``, ``ax``, a loop variable, a list of
  colours…) is bound again before any later cell reads it, or never read again: the cell
  computes nothing the chapter uses afterwards.

``--fix`` tags each such cell ``hide-input`` (the book shows the figure and a button
「図のコードを表示」, ``mystnb.code_prompt_show``/``code_prompt_hide``) and changes
nothing else; running it again changes nothing. JupyterLab, Colab and the student edition
show the code as before.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

TAG = "hide-input"
PROMPT_SHOW = "図のコードを表示"
PROMPT_HIDE = "図のコードを隠す"
#: Cells left as they are: exercises, solutions, live figures, the Colab cell, hidden ones.
SKIP_TAGS = {"solution", "widget", "colab-install", "remove-cell", "remove-input",
             "hide-cell", TAG}
#: Calls that show something else than the figure.
TEXT_CALLS = {"print", "display", "ResultTable"}


def _source(cell: dict) -> str:
    text = "".join(cell["source"])
    return "\n".join("" if re.match(r"\s*[%!]", line) else line for line in text.split("\n"))


def _tree(cell: dict) -> ast.Module | None:
    try:
        return ast.parse(_source(cell))
    except SyntaxError:
        return None


def _bound(tree: ast.Module) -> set[str]:
    """Names the cell binds at its top level (assignments, loops, with, imports, defs)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names


_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _reads(node: ast.AST, name: str) -> bool:
    """Whether ``node`` reads ``name`` of the cell's scope (a comprehension, lambda or
    function that binds ``name`` itself has its own)."""
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, ast.Load)
    if isinstance(node, _SCOPES) and any(
            name in {n.id for n in ast.walk(g.target) if isinstance(n, ast.Name)}
            for g in node.generators):
        return any(_reads(g.iter, name) for g in node.generators[:1])
    if isinstance(node, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
        args = node.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        if name in params or (not isinstance(node, ast.Lambda)
                               and name in _bound(ast.Module(body=node.body, type_ignores=[]))):
            return False
    return any(_reads(child, name) for child in ast.iter_child_nodes(node))


def _binds(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for n in ast.walk(node))


def _statements_read_first(body: list[ast.stmt], name: str) -> bool | None:
    """True if ``body`` reads ``name`` before binding it, False if it binds it first, None
    if it does neither (statements in order)."""
    for node in body:
        if isinstance(node, ast.For | ast.AsyncFor):
            if _reads(node.iter, name):
                return True
            if _binds(node.target, name):
                return False
            verdict = _statements_read_first(node.body + node.orelse, name)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            value = node.value
            if (value is not None and _reads(value, name)) or (
                    isinstance(node, ast.AugAssign) and _binds(node.target, name)):
                return True
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_reads(t, name) for t in targets):  # ax[0] = …, obj.x = …
                return True
            verdict = False if any(_binds(t, name) for t in targets) else None
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            verdict = True if _reads(node, name) else (False if node.name == name else None)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            verdict = False if name in _bound(ast.Module(body=[node], type_ignores=[])) \
                else None
        else:
            verdict = True if _reads(node, name) else (False if _binds(node, name) else None)
        if verdict is not None:
            return verdict
    return None


def _reads_before_binding(tree: ast.Module, name: str) -> bool | None:
    """True if the cell reads ``name`` before binding it, False if it binds it first, None
    if it does neither."""
    return _statements_read_first(tree.body, name)


def _used_later(cells: list[dict], index: int, name: str) -> bool:
    for cell in cells[index + 1:]:
        if cell["cell_type"] != "code":
            continue
        tree = _tree(cell)
        if tree is None:
            return True
        verdict = _reads_before_binding(tree, name)
        if verdict is not None:
            return verdict
    return False


def plotting_only(cells: list[dict], index: int) -> bool:
    """Whether code cell ``index`` of ``cells`` only draws a figure (module docstring)."""
    cell = cells[index]
    if cell["cell_type"] != "code" or SKIP_TAGS & set(cell.get("metadata", {}).get("tags", [])):
        return False
    outputs = cell.get("outputs", [])
    if not any("image/png" in o.get("data", {}) for o in outputs):
        return False
    if any(o.get("output_type") == "stream" or o.get("output_type") == "error"
           or (o.get("data") and "image/png" not in o["data"]) for o in outputs):
        return False
    tree = _tree(cell)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in TEXT_CALLS:
                return False
    return not any(_used_later(cells, index, name) for name in _bound(tree))


def fold(nb: dict) -> list[int]:
    """Tag every plotting-only cell of ``nb`` (in place); the indices of the cells tagged."""
    cells = nb["cells"]
    tagged = []
    for index, cell in enumerate(cells):
        if plotting_only(cells, index):
            metadata = cell.setdefault("metadata", {})
            metadata.setdefault("tags", []).append(TAG)
            prompts = metadata.setdefault("mystnb", {})
            prompts["code_prompt_show"] = PROMPT_SHOW
            prompts["code_prompt_hide"] = PROMPT_HIDE
            tagged.append(index)
    return tagged


def unfolded(nb: dict) -> list[int]:
    """Indices of the plotting-only cells of ``nb`` not yet folded."""
    return [i for i in range(len(nb["cells"])) if plotting_only(nb["cells"], i)]


def chapters(root: Path | None = None) -> list[Path]:
    from scripts.book import ROOT, toc_pages

    root = root or ROOT
    return [root / f"{page}.ipynb" for page in toc_pages(root)
            if (root / f"{page}.ipynb").exists()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    total = 0
    for path in args.notebooks or chapters():
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.fix:
            if fold(nb):
                path.write_text(json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True)
                                + "\n", encoding="utf-8")
        for index in unfolded(nb):
            total += 1
            first = "".join(nb["cells"][index]["source"]).split("\n")[0]
            print(f"{path} セル {index}: {first[:60]}")
    print(f"{total} 件")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
