"""Licences and citation: the files, the footer, the student note and CITATION.cff agree.

README.md「ライセンス」says which part is under which licence: the book's prose and
figures CC BY 4.0 (``LICENSE-CONTENT``), the code and everything else MIT (``LICENSE``).
``CITATION.cff`` is validated against the Citation File Format 1.2.0 JSON schema, copied
unchanged into ``tests/fixtures/cff-schema-1.2.0.json`` from
https://github.com/citation-file-format/citation-file-format (``schema.json`` at tag 1.2.0;
CC BY 4.0, Druskat et al.), with ``jsonschema`` (also what nbformat validates notebooks with).
"""

import datetime
import hashlib
import json
import re
import tomllib

import jsonschema
import pytest
import yaml

from book_ext.instructor_page import citation_markdown
from scripts.book import BODY_COLUMNS, ROOT, display_width, read_config
from scripts.make_student import CODE_LICENCE_URL, CONTENT_LICENCE_URL, LICENCE_LINE, NOTE
from scripts.publish import pages_url

#: SHA-256 of the licence texts as choosealicense.com publishes them (the files GitHub's
#: licence detection compares with): MIT from "Permission is hereby granted" to the end,
#: and CC BY 4.0's legal code whole. A changed word changes the licence: keep them exact.
MIT_TERMS_SHA256 = "f9c4c77baa3828004ee54b8a4f2db2e88ed44a6237a493965bf551fac0fcb62d"
CC_BY_4_SHA256 = "f5b745ef98087f531e719ee8ca6a96809444573ecc7173c6fa68eaad39b3cc3f"

SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "cff-schema-1.2.0.json").read_text("utf-8"))
CONFIG = read_config()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def cff_errors(cff: dict) -> list[str]:
    """The schema's complaints about ``cff``, as the CFF tools check it: YAML dates are
    cast to strings first (the schema's note to implementers), formats are checked."""
    as_json = json.loads(json.dumps(cff, default=str))
    validator = jsonschema.Draft7Validator(
        SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(as_json)]


@pytest.fixture(scope="module")
def cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def test_license_is_the_mit_text_with_the_books_copyright():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    holder = f"Copyright (c) {CONFIG['copyright']} {CONFIG['author']}"
    assert text.startswith(f"MIT License\n\n{holder}\n\nPermission is hereby granted, free")
    terms = text[text.index("Permission is hereby granted"):]
    assert hashlib.sha256(terms.encode()).hexdigest() == MIT_TERMS_SHA256


def test_license_content_is_the_cc_by_4_legal_code():
    text = (ROOT / "LICENSE-CONTENT").read_text(encoding="utf-8")
    assert text.startswith("Attribution 4.0 International\n\n=====")
    for part in ("Section 1 -- Definitions.", "Section 3 -- License Conditions.",
                 "Section 8 -- Interpretation.", "Creative Commons may be contacted at"):
        assert part in text
    assert hashlib.sha256(text.encode()).hexdigest() == CC_BY_4_SHA256


def test_pyproject_names_the_licence_and_its_file():
    project = PYPROJECT["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert all((ROOT / name).is_file() for name in project["license-files"])
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]  # PEP 639 fields


def test_the_footer_of_every_page_names_and_links_both_licences():
    footer = CONFIG["html"]["extra_footer"]
    links = dict((text, href) for href, text in re.findall(
        r'<a rel="license" href="([^"]+)">([^<]+)</a>', footer))
    assert links == {"CC BY 4.0": CONTENT_LICENCE_URL, "MIT ライセンス": CODE_LICENCE_URL}
    assert "文章と図は" in footer and "コードは" in footer


def test_the_student_note_says_the_same_in_one_line():
    line = next(line for line in NOTE.splitlines() if "CC BY 4.0" in line)
    assert line == f"> {LICENCE_LINE}"
    footer_text = re.sub(r"<[^>]+>", "", CONFIG["html"]["extra_footer"])
    note_text = re.sub(r"\[([^]]+)\]\([^)]+\)", r"\1", LICENCE_LINE)
    assert note_text.startswith(footer_text.removesuffix("。"))  # the same words
    assert CONTENT_LICENCE_URL in line and CODE_LICENCE_URL in line


def test_citation_cff_is_valid_against_the_cff_schema(cff):
    assert cff_errors(cff) == []


@pytest.mark.parametrize("broken, complaint", [
    ({"authors": None}, "authors"),
    ({"date-released": "1 December 2026"}, "date-released"),
    ({"cff-version": "1.1.0"}, "cff-version"),
    ({"license": ["MIT", "Not-A-Licence"]}, "license"),
    ({"keywords": "one string"}, "keywords"),
])
def test_the_schema_check_can_fail(cff, broken, complaint):
    errors = cff_errors({**cff, **broken})
    assert errors and any(complaint in e for e in errors), errors


def test_citation_cff_agrees_with_config_and_pyproject(cff):
    repository = CONFIG["repository"]["url"]
    assert cff["title"] == CONFIG["title"]
    assert cff["authors"] == [{"name": CONFIG["author"]}]
    assert cff["repository-code"] == repository
    assert cff["url"] == pages_url(repository)
    assert cff["version"] == PYPROJECT["project"]["version"]
    released = cff["date-released"]
    assert isinstance(released, datetime.date) and str(released.year) == CONFIG["copyright"]
    assert "license" not in cff  # CFF reads a list as a choice (OR); ours is one per part


def test_the_instructor_page_shows_the_citation_from_the_cff(cff):
    text = citation_markdown()
    bibtex = text.split("```bibtex\n")[1].split("```")[0]
    assert f"  title  = {{{cff['title']}}},\n" in bibtex
    assert f"  url    = {{{cff['repository-code']}}},\n" in bibtex
    assert f"  note   = {{バージョン {cff['version']}}},\n" in bibtex
    assert bibtex.count("{") == bibtex.count("}")
    assert f"{CONFIG['author']}（{cff['date-released'].year}）『{cff['title']}』\n" in text
    assert f"\n{cff['repository-code']}\nCC BY 4.0（{CONTENT_LICENCE_URL}）\n" in text
    assert CODE_LICENCE_URL in text and "`LICENSE`" in text
    blocks = re.findall(r"```\w+\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 3 and all(display_width(line) <= BODY_COLUMNS
                                    for block in blocks for line in block.splitlines())
