"""The reference list as the text cites it (issue 48, m13): a local Sphinx extension
(``_config.yml`` → ``sphinx.local_extensions``) that registers the pybtex style
``attnlab`` (``bibtex_default_style``).

1. Labels are author and year, as the citations in the text (``bibtex_reference_style:
   author_year``): ``[Vaswani et al., 2017]``, not ``[38]``. A list numbered [1]–[42] next
   to author–year citations was found only because it happened to be alphabetical.
2. An arXiv paper's identifier is given once: its URL (``https://arxiv.org/abs/ID``) is
   the link, so a note ``arXiv:ID`` (with or without the year after it) is dropped and a
   journal ``arXiv preprint arXiv:ID`` reads ``arXiv preprint``. A paper whose URL is
   elsewhere (the ACL Anthology) keeps its arXiv note.
"""

from __future__ import annotations

import re

from pybtex.database import Entry
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

#: An arXiv abstract's URL and its identifier.
ARXIV_URL = re.compile(r"^https?://arxiv\.org/abs/(?P<id>\d{4}\.\d{4,5})(v\d+)?/?$")


def _names(entry: Entry) -> list[str]:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    return [Text.from_latex(" ".join(p.prelast_names + p.last_names)).render_as("text")
            for p in persons if str(p) != "others"]


def author_year(entry: Entry) -> str:
    """``Vaswani et al., 2017``; ``Ba and Hinton, 2016`` for two authors."""
    names = _names(entry)
    year = entry.fields.get("year", "")
    if not names:
        who = Text.from_latex(entry.fields.get("organization", "")).render_as("text") or "—"
    elif len(names) == 1 and len(entry.persons.get("author", [])) <= 1:
        who = names[0]
    elif len(names) == 2 and len(entry.persons.get("author", [])) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {year}" if year else who


class AuthorYearLabels(BaseLabelStyle):
    """Author–year labels; two entries with the same one get a, b after the year."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(entry) for entry in entries]
        for label in set(labels):
            same = [i for i, other in enumerate(labels) if other == label]
            if len(same) > 1:
                for letter, i in zip("abcdefghijklmnopqrstuvwxyz", same, strict=False):
                    labels[i] = label + letter
        yield from labels


def without_repeated_arxiv(entry: Entry) -> Entry:
    """``entry`` with its arXiv identifier only in its URL (the module docstring, 2)."""
    match = ARXIV_URL.match(entry.fields.get("url", ""))
    if match is None:
        return entry
    arxiv = re.escape(match["id"])
    fields = dict(entry.fields)
    if re.fullmatch(rf"arXiv:{arxiv}(\s*\(\d{{4}}\))?", fields.get("note", "").strip()):
        del fields["note"]
    journal = fields.get("journal", "")
    if re.fullmatch(rf"arXiv preprint arXiv:{arxiv}", journal.strip()):
        fields["journal"] = "arXiv preprint"
    if fields == dict(entry.fields):
        return entry
    kept = Entry(entry.type, fields=fields, persons=entry.persons)
    kept.key = entry.key  # sphinxcontrib-bibtex links a citation to its entry by key
    return kept


class Style(PlainStyle):
    """pybtex's plain style with :class:`AuthorYearLabels` and each arXiv id once."""

    default_label_style = "attnlab_author_year"

    def format_entry(self, label, entry, bib_data=None):
        return super().format_entry(label, without_repeated_arxiv(entry), bib_data=bib_data)


register_plugin("pybtex.style.labels", "attnlab_author_year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "attnlab", Style)


def setup(app):
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
