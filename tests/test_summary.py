"""Chapter 12 shows every chapter's result: what it prints must be what each chapter's
committed notebook prints. A chapter whose numbers change while chapter 12 stays as it
was fails here (and the other way round); the tests at the end show that a changed digit
in either notebook is caught. Then the measuring functions of the encodings table."""

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from attnlab.experiments.length_generalization import (
    LENGTH_ABLATIONS,
    LENGTH_METHODS,
    LENGTH_TRAIN_LEN,
    TRAINED_KINDS,
    length_config,
    method_config,
)
from attnlab.experiments.summary import (
    ch01_saturation,
    ch03_costs,
    ch04_kv_cache,
    ch06_toeplitz,
    ch09_unseen_pairs,
    ch11_inference,
    extra_parameters,
    first_layer_weights,
    runs_past,
    shift_difference,
)
from attnlab.model import forward, init_params

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
CELL = r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)"  # mean (min–max)
VALUE = r"\d\.\d\d"  # one seed's accuracy


def printed(stem: str) -> str:
    """Everything the code cells of a committed notebook printed, as one text: its
    prints and the text of its tables (:class:`attnlab.tables.ResultTable`)."""
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                parts.append(out["text"])
            elif "attnlab-result-table" in str(out.get("data", {}).get("text/html", "")):
                parts.append(out["data"]["text/plain"] + "\n")
    return "".join(parts)


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(text)]


def line(text: str, pattern: str) -> str:
    """The first printed line matching ``pattern`` (a regular expression)."""
    found = re.search(pattern, text, flags=re.MULTILINE)
    assert found, f"{pattern!r} の行が出力にありません"
    return found.group(0)


def headline(ch12: str, chapter: int) -> str:
    """The numbers chapter 12 prints for a chapter: the line ``NN  numbers``."""
    return re.split(r"\s{2,}", line(ch12, rf"^{chapter:02d}  .*$"))[1]


def table_cells(text: str, label: str) -> list[str]:
    """The ``mean (min–max)`` cells of the row of a method in a table (name first)."""
    row = line(text, rf"^{re.escape(label)}(（[^）]*）)?  .*{CELL}.*$")
    return re.findall(CELL, row)


def finetune_rows(text: str, entry: str = CELL) -> list[tuple[str, str, str]]:
    """The rows (step, extrapolated, PI) of the table printed after the 4L fine-tune,
    each accuracy written as ``entry`` (chapter 10: mean (min–max); chapter 12: a value)."""
    after = text[text.index("長さ 4L での追加訓練"):]
    return re.findall(rf"^\s*(\d+)\s+({entry})\s+({entry})\s*$", after, flags=re.MULTILINE)


def seed_values(text: str, label: str) -> list[str]:
    """The 2L and 4L values of one seed in chapter 12's row of a method (name first)."""
    row = line(text, rf"^{re.escape(label)}(（[^）]*）)?\s+(.*\s)?{VALUE}\s+{VALUE}$")
    return re.findall(VALUE, row)[-2:]


def within(value: str, cell: str) -> bool:
    """Whether one seed's value lies in the min–max of chapter 10's ``mean (min–max)``."""
    low, high = (float(v) for v in re.findall(VALUE, cell)[1:])
    return low <= float(value) <= high


# One function per chapter: the chapter's own printed value(s), then chapter 12's.
def pair_01(ch12, own):
    raw = numbers(line(own, r"^\s*16  割らない .*$"))[-1]
    scaled = numbers(line(own, r"^\s*16  √d_k で割る .*$"))[-1]
    return [raw, scaled], numbers(headline(ch12, 1))


def pair_02(ch12, own):
    one = numbers(line(own, r"^1 ヘッド: 主語 .*$"))[-1]
    two = numbers(line(own, r"^2 ヘッド: 主語 .*$"))[-1]
    return [one, two], numbers(headline(ch12, 2))


def pair_03(ch12, own):
    row = numbers(line(own, r"^\s+1\s+1024\s+[\d,]+\s+[\d,]+.*$"))  # h, d_k, params, FLOPs
    return row[2:4], numbers(headline(ch12, 3))


def pair_04(ch12, own):
    row = line(own, r"^Llama 2 70B  .*$")
    sizes = re.findall(r"[\d.]+ [KMG]?i?B", row)[-2:]  # total: GQA, MHA
    return sizes, re.findall(r"[\d.]+ [KMG]?i?B", headline(ch12, 4))


def pair_05(ch12, own):
    ceiling = numbers(line(own, r"^bag-of-tokens の上限.*$"))[-1]
    runs = re.findall(r"^シード \d: 位置なし ([\d.]+)、学習可能な表 ([\d.]+)", own,
                      flags=re.MULTILINE)
    blind = [float(b) for b, _ in runs]
    ordered = [float(o) for _, o in runs]
    return blind + ordered + [ceiling], numbers(headline(ch12, 5))


def pair_06(ch12, own):
    return (numbers(line(own, r"^差 0, 1, 2, 5, 20 の内積: .*$").split(":")[1]),
            numbers(headline(ch12, 6)))


def pair_07(ch12, own):
    moved = numbers(line(own, r"^使わなかった行 .*$"))[-1]
    past = numbers(line(own, r"^位置 16〜63 の正解率.*$").split("[")[1])[:3]
    return [moved] + past, numbers(headline(ch12, 7))[:4]


def pair_08(ch12, own):
    # the chapter asserts the property (every diagonal of q_m·k_n is constant)
    # and chapter 12 shows the bound it asserts
    return (["どの斜めの線も一定" in own, "< 1e-9"],
            [True, headline(ch12, 8)])


def pair_09(ch12, own):
    unseen = numbers(line(own, r"^s = 2: 見たことのない角度に出るペア \d+ 個.*$"))[1]
    turned = numbers(line(own, r"^訓練中に 1 周以上回ったペア: .*$"))
    return [unseen, turned[-1]], numbers(headline(ch12, 9))[:2]


def pair_10(ch12, own):
    # chapter 12 repeats chapter 10's first seed with the same runs and batches: its
    # headline is chapter 10's line of seed 0, exactly
    theirs = numbers(line(own, r"^シード 0: [\d. /]+$").split(":")[1])
    ours = numbers(headline(ch12, 10))
    # and every 2L and 4L value of its tables (every method, the YaRN ablations, the
    # fine-tune at 4L) lies within chapter 10's min–max over the seeds
    pairs = []
    for method in LENGTH_METHODS:
        pairs += zip(table_cells(own, method)[1:], seed_values(ch12, method), strict=True)
    for label in LENGTH_ABLATIONS:
        pairs += zip(table_cells(own, label), seed_values(ch12, label), strict=True)
    ten, eleven = finetune_rows(own), finetune_rows(ch12, VALUE)
    assert [row[0] for row in ten] == [row[0] for row in eleven] != []  # the same steps
    for row, seed_row in zip(ten, eleven, strict=True):
        pairs += zip(row[1:], seed_row[1:], strict=True)
    theirs += [cell for cell, _ in pairs]
    ours += [cell if within(value, cell) else value for cell, value in pairs]
    return theirs, ours


def pair_11(ch12, own):
    row = line(own, r"^\s*32768\s+.*$")
    sizes = re.findall(r"[\d.]+ [KMG]?i?B", row)  # window, every token
    per_token = [numbers(line(own, rf"^{kind}\s+[\d,]+ 個$"))[0] for kind in ("MLA", "MHA")]
    ours = headline(ch12, 11)
    return sizes + per_token, (re.findall(r"[\d.]+ [KMG]?i?B", ours)
                               + numbers(ours.split("/")[-1]))


PAIRS = {
    "01_attention_review": pair_01, "02_why_heads": pair_02,
    "03_split_and_concat": pair_03, "04_what_heads_capture": pair_04,
    "05_attention_has_no_order": pair_05, "06_sinusoidal_encoding": pair_06,
    "07_learned_positions": pair_07, "08_rope": pair_08,
    "09_context_extension": pair_09, "10_length_generalization": pair_10,
    "11_inference_time": pair_11,
}
CH12 = "12_summary"


@pytest.mark.parametrize("stem", PAIRS)
def test_chapter_12_prints_what_the_chapter_printed(stem):
    theirs, ours = PAIRS[stem](printed(CH12), printed(stem))
    assert theirs == ours, (
        f"第 12 章 {ours} と {stem} {theirs} が違います: 両方を実行し直してください")


def test_every_chapter_of_the_book_has_its_line():
    chapters = {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")} - {CH12}
    assert chapters == set(PAIRS)


def _change_first_digit_after(text: str, anchor: str) -> str:
    """``text`` with the first digit after ``anchor`` changed (5 → 6, others → 5)."""
    start = text.index(anchor) + len(anchor)
    at = start + re.search(r"\d", text[start:]).start()
    digit = "6" if text[at] == "5" else "5"
    return text[:at] + digit + text[at + 1:]


@pytest.mark.parametrize("stem, pattern, old, new", [
    ("01_attention_review", r"^\s*16  割らない .*$", "0.957", "0.958"),
    ("02_why_heads", r"^1 ヘッド: 主語 .*$", "0.500", "0.501"),
    ("03_split_and_concat", r"^\s+1\s+1024\s+.*$", "4,194,304", "4,194,305"),
    ("04_what_heads_capture", r"^Llama 2 70B  .*$", "10 GiB", "12 GiB"),
    ("05_attention_has_no_order", r"^シード 1: 位置なし .*$", "なし 0.09", "なし 0.10"),
    ("06_sinusoidal_encoding", r"^差 0, 1, 2, 5, 20 .*$", "18.879", "18.880"),
    ("07_learned_positions", r"^位置 16〜63 .*$", "0.09 0.08 0.07", "0.09 0.07 0.07"),
    ("08_rope", r"^dots: .*$", "どの斜めの線も一定", "斜めの線が一定でない"),
    ("09_context_extension", r"^s = 2: 見たことの.*$", "16 個", "15 個"),
    # chapter 10's line of seed 0 (chapter 12's headline), and a min–max that no longer
    # holds chapter 12's value of seed 0: 4L, step 5 of the fine-tune at 4L, an ablation
    ("10_length_generalization", r"^シード 0: [\d. /]+$", "0: 0.50", "0: 0.49"),
    ("10_length_generalization", r"^RoPE 外挿  .*0\.48 \(.*$", "0.46–0.50", "0.46–0.49"),
    ("10_length_generalization", r"^\s*5\s+0\.65 \(.*$", "0.62–0.67", "0.62–0.66"),
    ("10_length_generalization", r"^YaRN（論文のランプ）  .*$", "(0.25–", "(0.27–"),
    ("11_inference_time", r"^\s*32768\s+.*$", "512 MiB", "511 MiB"),
    ("11_inference_time", r"^MLA\s+.*$", "576", "577"),
])
def test_a_changed_number_in_a_chapter_is_caught(stem, pattern, old, new):
    own = printed(stem)
    row = line(own, pattern)
    assert old in row
    theirs, ours = PAIRS[stem](printed(CH12), own.replace(row, row.replace(old, new)))
    assert theirs != ours


@pytest.mark.parametrize("chapter", range(1, 12))
def test_a_changed_digit_in_chapter_12_is_caught(chapter):
    ch12 = printed(CH12)
    row = line(ch12, rf"^{chapter:02d}  .*$")
    if chapter == 8:
        changed = ch12.replace(row, row.replace("1e-9", "1e-6"))
    else:
        changed = ch12.replace(row, _change_first_digit_after(row, f"{chapter:02d}  "))
    stem = list(PAIRS)[chapter - 1]
    theirs, ours = PAIRS[stem](changed, printed(stem))
    assert theirs != ours


# --- the cheap headlines, recomputed here ---------------------------------------------------

def test_cheap_headlines_match_chapter_12s_output():
    ch12 = printed(CH12)
    for h in (ch01_saturation(), ch03_costs(), ch04_kv_cache(), ch06_toeplitz(),
              ch09_unseen_pairs(), ch11_inference()):
        assert headline(ch12, h.chapter) == h.numbers


# --- the encodings table --------------------------------------------------------------------

L = LENGTH_TRAIN_LEN
TOKENS = np.random.default_rng(1).integers(32, size=(2, L))  # (2, L)


def _fresh(kind, seed=0):
    config = length_config(kind)
    return config, init_params(config, np.random.default_rng(seed))


@pytest.mark.parametrize("kind", TRAINED_KINDS)
def test_first_layer_weights_at_positions_0_to_t_are_the_models(kind):
    config, params = _fresh(kind)
    ours = first_layer_weights(params, config, TOKENS, np.arange(L))  # (B, H, T, T)
    np.testing.assert_allclose(ours, forward(params, TOKENS, config).attn[0], atol=1e-12)


@pytest.mark.parametrize("method", LENGTH_METHODS)
def test_shift_difference_is_zero_exactly_for_the_relative_schemes(method):
    kind, scaling = LENGTH_METHODS[method]
    config, params = _fresh(kind)
    config = method_config(config, scaling, L, 4 * L)
    moved = shift_difference(params, config, TOKENS, L)
    if config.positional in ("sinusoidal", "learned"):
        assert moved > 0.05
    else:
        assert moved < 1e-9


def test_extra_parameters_are_the_rows_of_the_table():
    config = length_config("学習（4L 行）")
    assert extra_parameters(config) == config.max_len * config.d_model
    for kind in ("位置なし", "正弦波", "RoPE", "ALiBi"):
        assert extra_parameters(length_config(kind)) == 0


def test_only_a_table_of_l_rows_cannot_run_past_l():
    assert not runs_past(length_config("学習（4L 行）", table_factor=1), 2 * L)
    assert runs_past(length_config("学習（4L 行）"), 4 * L)
    assert runs_past(length_config("RoPE"), 4 * L)


def test_first_layer_weights_rejects_positions_of_another_length():
    config, params = _fresh("RoPE")
    with pytest.raises(ValueError, match="positions"):
        first_layer_weights(params, config, TOKENS, np.arange(L + 1))


def test_chapter_12_retypes_no_chapters_setting():
    # every CHNN_ setting of summary.py is a name imported from the chapter's module (or
    # computed from one), never a number or a string typed again
    import ast

    import attnlab.experiments.summary as summary

    tree = ast.parse(Path(summary.__file__).read_text(encoding="utf-8"))
    settings = [node for node in tree.body if isinstance(node, ast.Assign)
                and re.search(r"\bCH\d\d_", ast.unparse(node.targets[0]))]
    assert len(settings) >= 9  # one line per chapter 01-09
    for node in settings:
        typed = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
        assert not typed, f"{ast.unparse(node)}: {typed} を章のモジュールから import してください"
