"""Publishing the book (make publish, scripts/publish.py) against local bare repositories only.

Each test works in a throwaway git repository under tmp_path: a clone of a small template
(this checkout's Makefile, scripts/, _config.yml, _toc.yml and requirements files, plus a
stand-in file for each page of _toc.yml and for src/attnlab) whose ``origin`` is a fresh
``git init --bare``. Nothing is pushed anywhere else. The real build (~90 s) never runs:
the build command is a fake that writes one small page per entry of _toc.yml from its
source file, so a changed notebook shows in the published page. One test publishes the
real ``_build/html`` of this checkout when it has been built.
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from scripts.book import ROOT, read_config, toc_pages
from scripts.plain_markdown import MYST_LEFT
from scripts.plain_notebooks import colab_path
from scripts.publish import BRANCH, dirty_files, fork_warning, main, pages_url

URL = "https://attnlab.github.io/mha-positional-encoding-course/"
NOTEBOOK = "notebooks/01_attention_review.ipynb"
PYTHON = shlex.quote(sys.executable)

FAKE_BUILD = """\
import sys
from pathlib import Path

site = Path.cwd() / "_build" / "html"
for page in PAGES:
    source = next(Path.cwd().glob(page + ".*"))
    out = site / (page + ".html")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("<html lang=ja>" + source.read_text(encoding="utf-8"), encoding="utf-8")
(site / "index.html").write_text("<html lang=ja>index", encoding="utf-8")
Path(sys.argv[1]).write_text("built", encoding="utf-8")
"""


def git_env(home: Path) -> dict[str, str]:
    """The environment of every git command here: no user or system configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "MAKE", "MFLAGS"))}
    (home / "gitconfig").touch()
    env.update(
        GIT_CONFIG_GLOBAL=str(home / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        # Speed only: the real site is 45 MB, mostly PNG, which zlib and delta search
        # cannot shrink; storing it as it is takes a third of the time.
        GIT_CONFIG_COUNT="2",
        GIT_CONFIG_KEY_0="core.compression",
        GIT_CONFIG_VALUE_0="0",
        GIT_CONFIG_KEY_1="pack.window",
        GIT_CONFIG_VALUE_1="0",
    )
    return env


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    ).stdout


def stand_in_chapter(page: str):
    """A chapter with MyST the Colab copy must not keep, and a marked solution."""
    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(
            f"(sec-{Path(page).name})=\n# {page} v1\n\n"
            "4 段です {cite}`vaswani2017attention`。\n\n```{note}\n注意します。\n```"),
        nbformat.v4.new_code_cell(
            "x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION",
            outputs=[nbformat.v4.new_output("stream", text="kept\n")]),
    ])


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A committed miniature of this repository: what publishing reads, nothing more."""
    base = tmp_path_factory.mktemp("template")
    env = git_env(base)
    repo = base / "repo"
    repo.mkdir()
    for name in ["Makefile", "_config.yml", "_toc.yml", ".gitignore", "requirements.txt",
                 "requirements-dev.txt", "pyproject.toml"]:
        shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "scripts", repo / "scripts",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "book").mkdir()
    shutil.copy2(ROOT / "book" / "references.bib", repo / "book" / "references.bib")
    for page in toc_pages():
        path = repo / f"{page}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        if page.startswith("notebooks/"):
            nbformat.write(stand_in_chapter(page), path.with_suffix(".ipynb"))
        else:
            path.write_text(f"{page} v1\n", encoding="utf-8")
    (repo / "src" / "attnlab").mkdir(parents=True)
    (repo / "src" / "attnlab" / "__init__.py").write_text('"""attnlab"""\n', encoding="utf-8")
    git(repo, "init", "--quiet", "-b", "main", env=env)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "--quiet", "-m", "template", env=env)
    return repo


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict[str, str]:
    environment = git_env(tmp_path)
    for key in list(os.environ):
        if key not in environment:
            monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    return environment


@pytest.fixture
def bare(tmp_path, env) -> Path:
    path = tmp_path / "site.git"
    git(tmp_path, "init", "--quiet", "--bare", "-b", "main", str(path))
    return path


@pytest.fixture
def repo(tmp_path, template, bare, env) -> Path:
    """A clone of the template whose origin is the empty bare repository."""
    path = tmp_path / "course"
    git(tmp_path, "clone", "--quiet", str(template), str(path))
    git(path, "remote", "set-url", "origin", str(bare))
    return path


def fake_build(tmp_path: Path) -> tuple[str, Path]:
    """The fake build command and the marker file it writes when it has run."""
    script = tmp_path / "fake_build.py"
    script.write_text(FAKE_BUILD.replace("PAGES", repr(toc_pages())), encoding="utf-8")
    marker = tmp_path / "built"
    return f"{PYTHON} {shlex.quote(str(script))} {shlex.quote(str(marker))}", marker


def make_publish(repo: Path, build: str, env: dict):
    """``make publish`` in ``repo`` with ``build`` for the strict build, run by this Python
    (BIN) without making a .venv (-o: its stamp counts as up to date)."""
    return subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "publish",
         f"BIN={Path(sys.executable).parent}", f"PUBLISH_BUILD={build}"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )


def published(bare: Path) -> list[str]:
    return git(bare, "ls-tree", "-r", "--name-only", BRANCH).split()


def refs(bare: Path) -> str:
    return git(bare, "for-each-ref")


# --- the pages' URL ------------------------------------------------------------------------

@pytest.mark.parametrize(("repository", "expected"), [
    ("https://github.com/attnlab/mha-positional-encoding-course", URL),
    ("https://github.com/Me/course.git/", "https://me.github.io/course/"),
    ("https://github.com/Me/me.github.io", "https://me.github.io/"),
    ("git@github.com:me/course.git", "https://me.github.io/course/"),
])
def test_pages_url_of_a_project_site_and_of_the_owners_site(repository, expected):
    assert pages_url(repository) == expected


def test_pages_url_refuses_a_url_that_is_not_a_github_repository():
    with pytest.raises(ValueError, match="GitHub のリポジトリの URL"):
        pages_url("https://gitlab.com/me/course")


def test_the_configured_repository_has_a_pages_url():
    assert pages_url(read_config()["repository"]["url"]) == URL


def test_fork_warning_only_for_another_github_repository():
    configured = "https://github.com/attnlab/course"
    note = fork_warning("origin", "git@github.com:me/course.git", configured)
    assert "me/course" in note and "attnlab/course" in note and "repository.url" in note
    assert fork_warning("origin", "https://github.com/AttnLab/course.git", configured) is None
    assert fork_warning("origin", "/tmp/site.git", configured) is None


# --- publishing ------------------------------------------------------------------------------

def test_make_publish_pushes_the_site_and_a_second_publish_adds_one_commit(
    repo, bare, env, tmp_path
):
    build, marker = fake_build(tmp_path)
    # Ignored files under the watched folders do not count as changes.
    (repo / "notebooks" / ".ipynb_checkpoints").mkdir()
    (repo / "notebooks" / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    (repo / "src" / "attnlab" / "__pycache__").mkdir()
    (repo / "src" / "attnlab" / "__pycache__" / "x.pyc").write_bytes(b"")

    first = make_publish(repo, build, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert marker.exists()
    assert f"ページの URL: {URL}" in first.stdout
    assert "Settings → Pages" in first.stdout  # said once, when gh-pages is new
    files = published(bare)
    assert {"index.html", ".nojekyll"} <= set(files)
    assert {f"{page}.html" for page in toc_pages()} <= set(files)
    assert_colab_copies(bare, files)
    assert not (repo / "_build" / "html" / "colab").exists()  # staged, the build untouched
    assert git(bare, "rev-list", "--count", BRANCH).strip() == "1"
    before = git(bare, "rev-parse", BRANCH).strip()

    path = repo / NOTEBOOK
    path.write_text(path.read_text(encoding="utf-8").replace("v1", "v2"), encoding="utf-8")
    git(repo, "commit", "--quiet", "-am", "change a chapter")
    second = make_publish(repo, build, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"ページの URL: {URL}" in second.stdout and "Settings" not in second.stdout
    assert git(bare, "rev-list", "--count", BRANCH).strip() == "2"
    assert git(bare, "rev-parse", f"{BRANCH}~1").strip() == before
    page = NOTEBOOK.replace(".ipynb", ".html")
    assert "v2" in git(bare, "show", f"{BRANCH}:{page}")
    assert "v2" in git(bare, "show", f"{BRANCH}:{colab_path(NOTEBOOK)}")
    assert git(bare, "for-each-ref", "--format=%(refname)").split() == [f"refs/heads/{BRANCH}"]


def assert_colab_copies(bare: Path, files: list[str]) -> None:
    """Every chapter is published as its Colab copy, in plain Markdown, solution kept."""
    chapters = [page for page in toc_pages() if page.startswith("notebooks/")]
    assert chapters and {colab_path(page) for page in chapters} <= set(files)
    for page in chapters:
        nb = nbformat.reads(git(bare, "show", f"{BRANCH}:{colab_path(page)}"), as_version=4)
        text, code = nb.cells[0].source, nb.cells[1]
        assert not MYST_LEFT.search(text), text
        assert "[Vaswani ら（2017）](" in text and "> **注**" in text and f"{page} v1" in text
        assert code.source == "x = 1\ny = 2" and code.outputs[0].text == "kept\n"


def test_a_publish_from_a_fresh_clone_builds_on_the_remote_history(repo, bare, env, tmp_path):
    build, _ = fake_build(tmp_path)
    assert main(["--build", build], root=repo) == 0
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(repo), str(other))
    git(other, "remote", "set-url", "origin", str(bare))
    assert main(["--build", build], root=other) == 0
    assert git(bare, "rev-list", "--count", BRANCH).strip() == "2"


def dirty_notebook(repo: Path) -> None:
    (repo / NOTEBOOK).write_text("changed\n", encoding="utf-8")


def dirty_attnlab(repo: Path) -> None:
    (repo / "src" / "attnlab" / "__init__.py").write_text("changed = 1\n", encoding="utf-8")


def untracked_notebook(repo: Path) -> None:
    (repo / "notebooks" / "99_new.ipynb").write_text("{}\n", encoding="utf-8")


def staged_deletion(repo: Path) -> None:
    git(repo, "rm", "--quiet", NOTEBOOK)


@pytest.mark.parametrize(("change", "named"), [
    (dirty_notebook, f"{NOTEBOOK}（変更）"),
    (dirty_attnlab, "src/attnlab/__init__.py（変更）"),
    (untracked_notebook, "notebooks/99_new.ipynb（未追跡）"),
    (staged_deletion, f"{NOTEBOOK}（削除）"),
])
def test_uncommitted_changes_refuse_before_the_build(
    change, named, repo, bare, tmp_path, capsys
):
    build, marker = fake_build(tmp_path)
    change(repo)
    assert dirty_files(repo) == [named]
    assert main(["--build", build], root=repo) == 1
    err = capsys.readouterr().err
    assert "公開しません" in err and named in err and "コミットしていない変更" in err
    assert "何も push していません" in err
    assert not marker.exists()
    assert refs(bare) == ""


def test_a_missing_remote_refuses_and_names_it_and_the_remotes_there(
    repo, bare, tmp_path, capsys
):
    build, marker = fake_build(tmp_path)
    assert main(["--remote", "upstream", "--build", build], root=repo) == 1
    err = capsys.readouterr().err
    assert "リモート 'upstream' がありません" in err and "origin" in err
    assert "何も push していません" in err
    assert not marker.exists()
    assert refs(bare) == ""


def test_an_unreachable_remote_refuses(repo, bare, tmp_path, capsys):
    build, marker = fake_build(tmp_path)
    git(repo, "remote", "add", "gone", str(tmp_path / "nowhere.git"))
    assert main(["--remote", "gone", "--build", build], root=repo) == 1
    err = capsys.readouterr().err
    assert "リモート 'gone'" in err and "接続できません" in err and "何も push していません" in err
    assert not marker.exists()


def test_a_build_command_that_cannot_run_refuses(repo, bare, capsys):
    assert main(["--build", "no-such-command-here build"], root=repo) == 1
    err = capsys.readouterr().err
    assert "ビルドのコマンド" in err and "実行できません" in err and "何も push していません" in err
    assert refs(bare) == ""


def test_a_failing_build_refuses_even_with_an_old_site_present(repo, bare, capsys):
    old = repo / "_build" / "html"
    old.mkdir(parents=True)
    (old / "index.html").write_text("old", encoding="utf-8")
    failing = f"{PYTHON} -c 'import sys; sys.exit(3)'"
    assert main(["--build", failing], root=repo) == 1
    err = capsys.readouterr().err
    assert "本のビルドが失敗しました" in err and "終了コード 3" in err
    assert "何も push していません" in err
    assert refs(bare) == ""


def test_make_publish_refuses_a_dirty_notebook_with_the_message(repo, bare, env, tmp_path):
    build, marker = fake_build(tmp_path)
    dirty_notebook(repo)
    done = make_publish(repo, build, env)
    assert done.returncode != 0
    assert "公開しません: notebooks と src/attnlab にコミットしていない変更" in done.stderr
    assert NOTEBOOK in done.stderr
    assert not marker.exists() and refs(bare) == ""


def test_a_chapter_that_cannot_be_converted_for_colab_refuses(repo, bare, env, tmp_path, capsys):
    build, marker = fake_build(tmp_path)
    (repo / NOTEBOOK).write_text("not a notebook", encoding="utf-8")
    git(repo, "commit", "--quiet", "-am", "break a chapter", env=env)
    assert main(["--build", build], root=repo) == 1
    err = capsys.readouterr().err
    assert "Colab 用のノートブックを作れません" in err and "何も push していません" in err
    assert marker.exists() and refs(bare) == ""


@pytest.mark.skipif(not (ROOT / "_build" / "html" / "index.html").exists(),
                    reason="本がまだビルドされていません（make build のあとで実行されます）")
def test_the_real_built_book_is_published_whole(repo, bare, capsys):
    site = ROOT / "_build" / "html"
    assert main(["--build", f"{PYTHON} -c pass", "--site", str(site)], root=repo) == 0
    files = set(published(bare))
    assert {"index.html", ".nojekyll", "searchindex.js"} <= files
    # every file of the site, whatever build it is from (a stale _build/html may lack a new
    # chapter: the fake-build tests above check the pages of _toc.yml)
    built = {path.relative_to(site).as_posix() for path in site.rglob("*") if path.is_file()}
    colab = {colab_path(page) for page in toc_pages() if page.startswith("notebooks/")}
    assert files == built | {".nojekyll"} | colab
    assert any(name.startswith("_static/") for name in files)
    assert URL in capsys.readouterr().out
