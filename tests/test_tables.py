"""ResultTable: the chapters' tables of results as HTML and as aligned text."""

import html.parser

import numpy as np
import pytest

from attnlab.tables import ROOT_HTML, ResultTable, math_html, text_width


def test_text_width_counts_a_japanese_character_as_two_columns():
    assert text_width("RoPE") == 4
    assert text_width("γ̃") == 1  # a combining tilde takes no column
    assert text_width("方法") == 4
    assert text_width("学習（4L 行）") == 13


def test_text_columns_line_up_under_japanese_headers():
    table = ResultTable(["方法", "2L", "正解率（最小）"],
                        [["RoPE+YaRN", "1.00", "0.94"], ["位置なし", "0.13", "0.12"]])
    lines = str(table).splitlines()
    assert lines == ["方法         2L  正解率（最小）",
                     "RoPE+YaRN  1.00            0.94",
                     "位置なし   0.13            0.12"]
    # every line ends its columns at the same screen column
    assert len({text_width(line) for line in lines}) == 1


def test_title_and_note_frame_the_rows_in_text_and_html():
    table = ResultTable(["方法", "4L"], [["学習（L 行）", "×"]],
                        title="長さ別の正解率", note="× = 実行不可")
    lines = str(table).splitlines()
    assert lines[0] == "長さ別の正解率" and lines[-1] == "× = 実行不可"
    page = table._repr_html_()
    assert '<p class="attnlab-table-title">長さ別の正解率</p>' in page
    assert '<p class="attnlab-table-note">× = 実行不可</p>' in page


class _Cells(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self._open = [], None

    def handle_starttag(self, tag, attrs):
        if tag in ("th", "td"):
            self._open = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._open:
            self._open[2].append(data)

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._open:
            kind, attrs, text = self._open
            self.cells.append((kind, attrs.get("scope"), attrs.get("style", ""), "".join(text)))
            self._open = None


def test_html_has_column_and_row_headers_and_right_aligned_numbers():
    table = ResultTable(["方法", "L = 16", "2L = 32"],
                        [["RoPE 外挿", "1.00 (1.00–1.00)", "0.48 (0.46–0.49)"],
                         ["ALiBi", "0.90 (0.90–0.91)", "0.90 (0.90–0.90)"]])
    parser = _Cells()
    parser.feed(table._repr_html_())
    header, first = parser.cells[:3], parser.cells[3:6]
    assert [(kind, scope) for kind, scope, _, _ in header] == [("th", "col")] * 3
    assert first[0][:2] == ("th", "row") and first[0][3] == "RoPE 外挿"
    assert "text-align: left" in first[0][2]
    assert all(kind == "td" and "text-align: right" in style for kind, _, style, _ in first[1:])
    assert first[2][3] == "0.48 (0.46–0.49)"


def test_html_escapes_the_text_of_cells():
    page = ResultTable(["値<1"], [["x & y"]])._repr_html_()
    assert "値&lt;1" in page and "x &amp; y" in page and "値<1" not in page


def test_a_numeric_first_column_is_data_and_align_can_be_set():
    table = ResultTable(["h", "d_k"], [[1, 64], [16, 4]])
    assert table.align == "rr" and "<th scope=\"row\"" not in table._repr_html_()
    assert str(table).splitlines() == [" h  d_k", " 1   64", "16    4"]
    assert ResultTable(["長さ", "1 つ前"], [["2L", "0.26"]], align="lr").align == "lr"


def test_ipython_shows_the_text_and_the_html():
    from IPython.core.formatters import DisplayFormatter

    table = ResultTable(["方法", "2L"], [["RoPE", "1.00"]], title="表")
    data, _ = DisplayFormatter().format(table)
    assert data["text/plain"] == str(table)
    assert data["text/html"].startswith('<div class="attnlab-result-table">')
    # a wide table scrolls, and a keyboard can scroll it (axe scrollable-region-focusable)
    assert '<div class="attnlab-table-scroll" tabindex="0">' in data["text/html"]


@pytest.mark.parametrize(("kwargs", "named"), [
    (dict(columns=["a"], rows=[[0.123]]), "rows[0][0]"),
    (dict(columns=["a", "b"], rows=[["1"]]), "rows[0]"),
    (dict(columns="ab", rows=[]), "columns"),
    (dict(columns=["a"], rows=[[True]]), "rows[0][0]"),
    (dict(columns=["a"], rows=[[np.float64(0.5)]]), "rows[0][0]"),
    (dict(columns=["a"], rows=[["1"]], align="x"), "align"),
])
def test_bad_input_is_refused_in_japanese_naming_the_argument(kwargs, named):
    with pytest.raises((TypeError, ValueError)) as err:
        ResultTable(**kwargs)
    assert named in str(err.value)
    assert any("\u3040" <= ch <= "\u30ff" for ch in str(err.value))


def test_the_module_example_holds():
    import doctest

    import attnlab.tables

    assert doctest.testmod(attnlab.tables).failed == 0


def test_a_title_and_a_note_of_several_lines():
    table = ResultTable(["d_k", "(a)"], [[4, "0.42"]], title="(a) 最大の重み\n(b) 同・割る",
                        note="注 1\n注 2 <")
    assert str(table).splitlines()[:2] == ["(a) 最大の重み", "(b) 同・割る"]
    assert str(table).splitlines()[-2:] == ["注 1", "注 2 <"]
    page = table._repr_html_()
    assert '<p class="attnlab-table-title">(a) 最大の重み<br>(b) 同・割る</p>' in page
    assert "注 1<br>注 2 &lt;" in page


def test_numpy_integers_are_integers_and_row_headers_can_be_asked_for():
    table = ResultTable(["実行", "正解率"], [[np.int64(1), "0.97"]], row_headers=True)
    assert str(table).splitlines()[1] == "   1    0.97"
    assert '<th scope="row"' in table._repr_html_()
    assert '<th scope="row"' not in ResultTable(["方法"], [["RoPE"]],
                                                row_headers=False)._repr_html_()


@pytest.mark.parametrize(("text", "shown"), [
    ("d_k", "<i>d</i><sub><i>k</i></sub>"),
    ("h_kv", "<i>h</i><sub><i>kv</i></sub>"),
    ("d_model = 512", "<i>d</i><sub>model</sub> = 512"),  # a word upright
    ("√d_k で割る", "√<i>d</i><sub><i>k</i></sub> で割る"),
    ("射影 XW_Q, XW_K", "射影 <i>XW</i><sub><i>Q</i></sub>, <i>XW</i><sub><i>K</i></sub>"),
    ("m − n = 2 のスコア", "<i>m</i> − <i>n</i> = 2 のスコア"),  # one-letter operands
    ("4L、P > L の行", "4L、<i>P</i> &gt; <i>L</i> の行"),
    ("位置 i >= L", "位置 <i>i</i> &gt;= <i>L</i>"),
    ("i−1 に置く重み", "<i>i</i>−1 に置く重み"),
    ("q3·k1 と q_3·k_1", "q3·k1 と <i>q</i><sub>3</sub>·<i>k</i><sub>1</sub>"),
    ("(a) 1e-3 未満、2L = 32", "(a) 1e-3 未満、2L = 32"),  # a label, a number, 2L upright
    ("q_m·k_n と q_{m+c}·k_{n+c}", "<i>q</i><sub><i>m</i></sub>·<i>k</i><sub><i>n</i></sub> と "
     "<i>q</i><sub><i>m</i>+<i>c</i></sub>·<i>k</i><sub><i>n</i>+<i>c</i></sub>"),
    ("θ_i（底 10000）", "<i>θ</i><sub><i>i</i></sub>（底 10000）"),
    ("γ̃_0", "<i>γ̃</i><sub>0</sub>"),
    ("スコア QK^T/√d_k", "スコア <i>QK</i><sup>⊤</sup>/√<i>d</i><sub><i>k</i></sub>"),
    ("Var[q·k/√d_k]", "Var[<i>q</i>·<i>k</i>/√<i>d</i><sub><i>k</i></sub>]"),
    ("出力 Concat·W_O", "出力 Concat·<i>W</i><sub><i>O</i></sub>"),
    ("‖∂p/∂q‖・√d_k で割る", "‖∂<i>p</i>/∂<i>q</i>‖・√<i>d</i><sub><i>k</i></sub> で割る"),
    ("‖∂p/∂q_0‖", "‖∂<i>p</i>/∂<i>q</i><sub>0</sub>‖"),
    ("∂x/∂θ", "∂<i>x</i>/∂<i>θ</i>"),
    ("∂pos と ∂", "∂pos と ∂"),  # a word after ∂ stays as written
])
def test_math_html_sets_plain_text_symbols_as_math(text, shown):
    assert math_html(text) == shown.replace("√", ROOT_HTML)


def test_the_radical_sign_is_upright_in_a_latin_font():
    # issue 48, N6: a Japanese font draws √ as a slanted tick; the sign is set upright in a
    # Latin font, inline (JupyterLab and Colab do not load the book's CSS), wherever it is
    assert "font-style: normal" in ROOT_HTML and "DejaVu Sans" in ROOT_HTML
    assert ROOT_HTML.count("√") == 1
    for text in ("√d_k", "Var[q·k/√d_k]", "√2 倍", "√d_model·|e|"):
        shown = math_html(text)
        assert shown.count(ROOT_HTML) == text.count("√") == 1
        assert "√" not in shown.replace(ROOT_HTML, "")
    page = ResultTable(["Var[q·k/√d_k]"], [["1.00"]], title="√d_k で割る")._repr_html_()
    assert page.count(ROOT_HTML) == 2


def test_math_html_leaves_names_and_escapes_the_rest():
    assert math_html("raw_scores と n_heads") == "raw_scores と n_heads"  # code names
    assert math_html("a < b & c") == "<i>a</i> &lt; <i>b</i> &amp; c"
    assert math_html("1 < 2 & 名前") == "1 &lt; 2 &amp; 名前"
    with pytest.raises(ValueError, match="text"):
        math_html(3)


def test_html_sets_symbols_as_math_and_text_keeps_them_plain():
    table = ResultTable(["d_k", "h", "Var[q·k/√d_k]"], [["4", "2", "1.00"]],
                        title="√d_k で割る", note="θ_i は角度")
    page = table._repr_html_()
    assert "d_k" not in page and "θ_i" not in page  # no underscore reaches the page
    assert ('<p class="attnlab-table-title">' + ROOT_HTML + '<i>d</i><sub><i>k</i></sub>'
            ' で割る</p>') in page
    assert ">" + "<i>h</i></th>" in page  # a one-letter header is a variable
    assert str(table).splitlines()[:2] == ["√d_k で割る", "d_k  h  Var[q·k/√d_k]"]
