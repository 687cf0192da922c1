"""The reference list's pybtex style (book_ext/references.py, issue 48 m13)."""

from __future__ import annotations

import pytest
from pybtex.database import Entry, Person, parse_file
from pybtex.plugin import find_plugin

from book_ext.references import ARXIV_URL, author_year, without_repeated_arxiv
from scripts.book import ROOT


def _entry(authors, year="2017", **fields):
    return Entry("article", fields={"year": year, "title": "T", **fields},
                 persons={"author": [Person(a) for a in authors]})


@pytest.mark.parametrize(("authors", "label"), [
    (["Vaswani, Ashish"], "Vaswani, 2017"),
    (["Ba, Jimmy", "Hinton, Geoffrey"], "Ba and Hinton, 2017"),
    (["Vaswani, Ashish", "Shazeer, Noam", "Parmar, Niki"], "Vaswani et al., 2017"),
    (["Touvron, Hugo", "others"], "Touvron et al., 2017"),
    (["Lebr{\\'o}n, Federico"], "Lebrón, 2017"),
    (["de Jong, Michiel"], "de Jong, 2017"),
])
def test_a_label_is_author_and_year_as_the_text_cites(authors, label):
    assert author_year(_entry(authors)) == label


def test_an_arxiv_id_is_given_once_by_its_url():
    url = "https://arxiv.org/abs/1706.03762"
    assert ARXIV_URL.match(url)["id"] == "1706.03762"
    entry = _entry(["A, B"], note="arXiv:1706.03762", url=url)
    entry.key = "vaswani2017attention"
    note = without_repeated_arxiv(entry)
    assert "note" not in note.fields and note.fields["url"] == url
    assert note.key == "vaswani2017attention"  # the key links citations to the entry
    dated = without_repeated_arxiv(_entry(["A, B"], note="arXiv:1706.03762 (2023)", url=url))
    assert "note" not in dated.fields
    journal = without_repeated_arxiv(
        _entry(["A, B"], journal="arXiv preprint arXiv:1706.03762", url=url))
    assert journal.fields["journal"] == "arXiv preprint"


def test_other_notes_and_other_urls_are_kept():
    other = without_repeated_arxiv(_entry(["A, B"], note="arXiv:1902.10186",
                                          url="https://aclanthology.org/N19-1357/"))
    assert other.fields["note"] == "arXiv:1902.10186"  # the only place of its arXiv id
    mismatch = without_repeated_arxiv(_entry(["A, B"], note="arXiv:1111.11111",
                                             url="https://arxiv.org/abs/1706.03762"))
    assert mismatch.fields["note"] == "arXiv:1111.11111"
    explained = without_repeated_arxiv(_entry(
        ["A, B"], note="Also in NeurIPS 2021", journal="arXiv preprint arXiv:2203.03466",
        url="https://arxiv.org/abs/2203.03466"))
    assert explained.fields["note"] == "Also in NeurIPS 2021"


def test_the_books_references_get_distinct_labels_and_each_arxiv_id_once():
    style = find_plugin("pybtex.style.formatting", "attnlab")()
    entries = list(style.sort(parse_file(ROOT / "book" / "references.bib").entries.values()))
    labels = list(style.format_labels(entries))
    assert len(set(labels)) == len(labels)
    assert not any(label[0].isdigit() for label in labels)
    backend = find_plugin("pybtex.backends", "text")()
    for label, entry in zip(labels, entries, strict=True):
        formatted = style.format_entry(label, entry)
        assert formatted.key == entry.key
        text = formatted.text.render(backend)
        match = ARXIV_URL.match(entry.fields.get("url", ""))
        if match:
            assert text.count(match["id"]) == 1, (label, text)
