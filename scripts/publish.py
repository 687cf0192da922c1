"""Publish the book: the strict build, then ``_build/html`` to a remote's ``gh-pages`` branch.

Usage: python -m scripts.publish [--remote origin] [--build "make build"] [--site _build/html]
(``make publish REMOTE=name`` runs it with the strict build of ``make test``.)

Before anything is built or pushed it refuses, with a Japanese message and exit code 1, when

- the remote does not exist (or cannot be reached),
- ``notebooks/`` or ``src/attnlab/`` have uncommitted changes, tracked or untracked: the
  published book would then show something no commit holds;

and after the build, when the build fails or left no ``index.html``. Otherwise the site is
staged (hard links to the build, ``_build/html`` itself is left as built) with the Colab
copies of the chapters added: each chapter in plain Markdown, solutions kept, under
``colab/notebooks/`` (``scripts/plain_notebooks.py``; the book's Colab button opens them,
Colab runs no MyST). Then ``ghp-import`` writes the staged site as ONE new commit on top
of the remote's ``gh-pages`` (fetched first, so the history is kept and a publish from
another clone or from CI is never overwritten), with a ``.nojekyll`` (GitHub Pages must not
run Jekyll: it drops the ``_static/`` and ``_images/`` folders), and pushes it. Last it
prints the URL the pages get, derived from ``repository.url`` of ``_config.yml``.

``--build`` is the command that builds the site; tests replace it with a quick fake.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

# Not scripts.book's ROOT and read_config: importing it loads nbclient, seconds per run.
ROOT = Path(__file__).resolve().parent.parent

BRANCH = "gh-pages"
WATCHED = ("notebooks", "src/attnlab")
DEFAULT_BUILD = "make build"
DEFAULT_SITE = "_build/html"
NOTHING_PUSHED = "何も push していません。"

GITHUB_URL = re.compile(
    r"^(?:https?://|ssh://git@|git@)github\.com[/:]"
    r"(?P<owner>[A-Za-z0-9-]+)/(?P<repo>[A-Za-z0-9._-]+?)(?:\.git)?/?$"
)


class Refusal(Exception):
    """A reason not to publish, in Japanese; nothing has been pushed when it is raised."""


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``git args`` in ``root`` and capture its output as text."""
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=check
    )


def github_repo(url: str) -> tuple[str, str] | None:
    """``(owner, repo)`` of a GitHub repository URL (https, ssh or scp form), else ``None``."""
    match = GITHUB_URL.match(url.strip())
    return (match["owner"], match["repo"]) if match else None


def pages_url(repository_url: str) -> str:
    """The GitHub Pages URL of a repository: ``https://OWNER.github.io/REPO/``, or
    ``https://OWNER.github.io/`` for the repository named ``OWNER.github.io``.

    Raises ValueError (Japanese) when ``repository_url`` is not a GitHub repository URL.
    """
    found = github_repo(repository_url)
    if found is None:
        raise ValueError(
            f"repository.url={repository_url!r} は GitHub のリポジトリの URL"
            "（https://github.com/OWNER/REPO）ではありません"
        )
    owner, repo = found
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if repo.lower() == host else f"https://{host}/{repo}/"


def dirty_files(root: Path, paths=WATCHED) -> list[str]:
    """Files under ``paths`` with uncommitted changes, staged or not, or untracked (ignored
    files do not count), each as ``path（状態）``."""
    out = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
    entries = out.stdout.split("\0")
    found = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if status[0] in "RC":
            i += 1  # the original path of a rename or copy follows
        if status == "??":
            kind = "未追跡"
        elif "D" in status:
            kind = "削除"
        elif "A" in status:
            kind = "追加"
        else:
            kind = "変更"
        found.append(f"{path}（{kind}）")
    return found


def check_clean(root: Path) -> None:
    """Refuse when ``notebooks/`` or ``src/attnlab/`` have uncommitted changes."""
    found = dirty_files(root)
    if found:
        listing = "\n".join(f"  {line}" for line in found)
        raise Refusal(
            f"{' と '.join(WATCHED)} にコミットしていない変更があります"
            "（公開する本が、どのコミットとも一致しなくなります）:\n"
            f"{listing}\n"
            "コミットするか、git stash -u で退けてから、もう一度実行してください。"
        )


def check_remote(root: Path, remote: str) -> str:
    """The URL of ``remote``; refuse when it is missing or cannot be reached. Returns it."""
    names = git(root, "remote").stdout.split()
    if remote not in names:
        have = "、".join(names) if names else "なし"
        raise Refusal(
            f"git のリモート '{remote}' がありません（このリポジトリのリモート: {have}）。\n"
            f"git remote add {remote} URL で加えるか、make publish REMOTE=名前 で選んでください。"
        )
    url = git(root, "remote", "get-url", remote).stdout.strip()
    reach = git(root, "ls-remote", "--heads", remote, check=False)
    if reach.returncode != 0:
        reason = reach.stderr.strip().splitlines()[-1:] or ["（git の説明なし）"]
        raise Refusal(f"git のリモート '{remote}'（{url}）に接続できません: {reason[0]}")
    return url


def fork_warning(remote: str, remote_url: str, repository_url: str) -> str | None:
    """A note when ``remote`` is a GitHub repository other than ``repository.url``: the
    printed URL, the launch buttons and the Colab cells would point at the other one."""
    pushed, configured = github_repo(remote_url), github_repo(repository_url)
    if pushed is None or configured is None:
        return None
    if [s.lower() for s in pushed] == [s.lower() for s in configured]:
        return None
    return (
        f"注意: リモート '{remote}' は {'/'.join(pushed)} ですが、_config.yml の repository.url は "
        f"{'/'.join(configured)} です。フォークなら repository.url を書き換えてください"
        "（CONTRIBUTING.md の「フォークするとき」）。"
    )


def run_build(root: Path, build: str, site: Path) -> None:
    """Run the build command in ``root``; refuse when it fails or made no ``index.html``."""
    print(f"本をビルドします: {build}", flush=True)
    try:
        result = subprocess.run(shlex.split(build), cwd=root)
    except (OSError, ValueError) as error:
        raise Refusal(f"ビルドのコマンド {build!r} を実行できません: {error}") from None
    if result.returncode != 0:
        raise Refusal(
            f"本のビルドが失敗しました（{build}、終了コード {result.returncode}）。"
            "上の出力を見て直してください。"
        )
    if not (site / "index.html").is_file():
        raise Refusal(f"ビルドのあとに {site / 'index.html'} がありません。")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)


def stage_site(root: Path, site: Path, staging: Path) -> Path:
    """``site`` with the Colab copies of the chapters of ``root`` added under ``colab/``
    (``scripts.plain_notebooks``), written to ``staging/site``; returns that folder."""
    # imported here: it loads nbclient and pybtex, seconds that a refusal need not wait
    from scripts.plain_notebooks import COLAB_FOLDER, convert

    staged = staging / "site"
    shutil.copytree(site, staged, copy_function=_link_or_copy)
    target = staged / COLAB_FOLDER
    if target.exists():  # a site that already has the folder: the copies replace it
        shutil.rmtree(target)
    try:
        written = convert(target, root)
    except Exception as error:  # a chapter that cannot be read or converted
        raise Refusal(f"Colab 用のノートブックを作れません: {error}") from None
    print(f"Colab 用に {len(written)} 章を MyST のない Markdown で {COLAB_FOLDER}/ に書きました",
          flush=True)
    return staged


def push_site(root: Path, remote: str, site: Path) -> tuple[str, bool]:
    """Write ``site`` as one new commit on top of the remote's ``gh-pages`` and push it;
    returns the new commit's hash and whether this publish created the branch.

    The remote's branch is fetched first into ``REMOTE/gh-pages``, which ghp-import takes as
    the parent (a first publish, with no such branch, starts the history).
    """
    found = git(root, "ls-remote", "--exit-code", "--heads", remote, BRANCH, check=False)
    if found.returncode == 0:
        refspec = f"+refs/heads/{BRANCH}:refs/remotes/{remote}/{BRANCH}"
        git(root, "fetch", "--quiet", remote, refspec)
    source = git(root, "rev-parse", "--short", "HEAD", check=False).stdout.strip() or "?"
    message = f"Publish the book built from {source}"
    done = subprocess.run(
        [sys.executable, "-m", "ghp_import", "--no-jekyll", "--push", "--remote", remote,
         "--branch", BRANCH, "--message", message, str(site)],
        cwd=root,
    )
    if done.returncode != 0:
        raise Refusal(
            f"ghp-import が {remote} の {BRANCH} に push できませんでした（終了コード "
            f"{done.returncode}）。上の git の出力を見てください。"
        )
    commit = git(root, "rev-parse", "--short", f"refs/heads/{BRANCH}").stdout.strip()
    return commit, found.returncode != 0


def publish(root: Path, remote: str = "origin", build: str = DEFAULT_BUILD,
            site: Path | None = None) -> str:
    """Check, build and push (see the module's docstring); returns the pages' URL.

    Raises Refusal before anything is pushed.
    """
    site = site if site is not None else root / DEFAULT_SITE
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    repository_url = config["repository"]["url"]
    try:
        url = pages_url(repository_url)
    except ValueError as error:
        raise Refusal(f"公開先の URL がわかりません: {error}。") from None
    inside = git(root, "rev-parse", "--is-inside-work-tree", check=False)
    if inside.stdout.strip() != "true":
        raise Refusal(f"{root} は git のリポジトリではありません。")
    problems, remote_url = [], None
    try:
        remote_url = check_remote(root, remote)
    except Refusal as refusal:
        problems.append(str(refusal))
    try:
        check_clean(root)
    except Refusal as refusal:
        problems.append(str(refusal))
    if problems:
        raise Refusal("\n\n".join(problems))
    warning = fork_warning(remote, remote_url, repository_url)
    if warning:
        print(warning, flush=True)
    run_build(root, build, site)
    with tempfile.TemporaryDirectory(prefix=".publish-", dir=site.parent) as staging:
        staged = stage_site(root, site, Path(staging))
        commit, first = push_site(root, remote, staged)
    shown = site.relative_to(root) if site.is_relative_to(root) else site
    print(f"本を公開しました: {shown} → {remote} の {BRANCH}（コミット {commit}）")
    print(f"ページの URL: {url}")
    if first:
        print(
            f"（{remote} に {BRANCH} ができました。GitHub のリポジトリの Settings → Pages で、"
            f"Source を「Deploy from a branch」、ブランチを {BRANCH} の / (root) にしてください）"
        )
    return url


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.publish", description=__doc__)
    parser.add_argument("--remote", default="origin", help="push する git のリモート")
    parser.add_argument("--build", default=DEFAULT_BUILD, help="本を作るコマンド")
    parser.add_argument(
        "--site", type=Path, default=None, help=f"公開するフォルダー（{DEFAULT_SITE}）"
    )
    args = parser.parse_args(argv)
    site = None if args.site is None else (root / args.site).resolve()
    try:
        publish(root, args.remote, args.build, site)
    except Refusal as refusal:
        print(f"公開しません: {refusal}\n{NOTHING_PUSHED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
