# Every target sets itself up: a missing .venv is created and requirements-dev.txt installed
# (requirements.txt, what readers and Binder need, plus what builds and tests the book).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help book test lint live-states unit nbval build student student-test test-portable test-browser \
        test-browser-built test-lab test-parity notebooks colab-cell typography budgets lab grade publish \
        studies study-length_generalization clean distclean

help:
	@echo "make book       本を _build/html に作る"
	@echo "make test       リンター・attnlab のテスト・ノートブックの照合・本のビルド"
	@echo "make notebooks  全ノートブックを実行し直して出力を保存する"
	@echo "make typography 日本語の段落を 1 行にし、日本語の間の余分な空白を消す"
	@echo "make colab-cell 各章の Colab 用のインストールのセルを _config.yml の URL に合わせる"
	@echo "make student    解答を除いた学生版を student/ に書く"
	@echo "make test-portable  全ノートブックを AVX2・AVX・AVX なしの CPU のレベルで照合し直す"
	@echo "make test-browser  本をビルドし、全ページを headless Chromium で開いて確かめる"
	@echo "make budgets    各章の Run All と make test の各段階の時間を表示する（テストではない）"
	@echo "make test-parity  numpy のコードを PyTorch と transformers に照らす（専用の .venv-parity）"
	@echo "make studies    すべての研究（章より大きな実験）を全規模で実行し notebooks/studies/ に書く"
	@echo "make study-length_generalization  第 10 章の研究だけ（2 コアで約 40〜55 分）"
	@echo "make test-lab   JupyterLab でライブ図を実行し、headless Chromium で操作して図が動くか確かめる"
	@echo "make grade SUBMISSIONS=フォルダー  提出されたノートブックを自己チェックで採点し、grades/ に表を書く"
	@echo "make publish    厳格なビルドのあと、本を origin の gh-pages ブランチに公開する（REMOTE=名前 で別のリモート）"
	@echo "make lab        JupyterLab で notebooks/ を開く"
	@echo "make clean      生成物を消す（distclean は .venv も消す）"

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

# The first matplotlib import builds the font cache and says so on stderr; do it here so
# that the message never lands in a notebook output.
.PHONY: warm
warm: $(STAMP)
	@$(BIN)/python -c "import matplotlib.pyplot, matplotlib_fontja"

# Every state of every live figure is drawn first, on every core (scripts/live_states.py),
# into the cache the build reads (_build/.attnlab-live-cache): Sphinx reads one page at a time.
book: warm
	$(BIN)/python -m scripts.live_states --jobs $(JOBS)
	$(BIN)/jupyter-book build . --keep-going
	@echo "本: $(CURDIR)/_build/html/index.html"

# nbval checks the student edition too (tests/nbval_student.py): the cells before a chapter's
# first exercise run once for both editions, then the student's cells from there on.
# live-states draws every state of every live figure once, on every core, before unit: the
# unit test compares each live update with that picture (tests/test_widgets.py), build reads it.
test: lint live-states unit nbval build

# Every state of every live figure, light and dark, into _build/.attnlab-live-cache (keyed by
# the code that draws it: a state drawn before by the same code is not drawn again).
live-states: warm
	$(BIN)/python -m scripts.live_states --jobs $(JOBS)

# actionlint checks .github/workflows/ (and their run: scripts with shellcheck, where installed).
lint: $(STAMP)
	$(BIN)/ruff check src tests scripts book_ext benchmarks
	$(BIN)/actionlint

# How many processes the tests use at once: pytest-xdist's workers for unit and nbval, the
# chapters student-test runs side by side and the processes that draw the live figures' states
# before book and build (auto: one per CPU; JOBS=1 runs one at a time).
# --dist loadfile keeps a test module (so its module-scoped fixtures train once) and a
# notebook (its cells in order, in one kernel) on one worker; the slowest files start first
# (tests/slow_first.py, in place of pytest-xdist's order by number of tests).
JOBS ?= auto

unit: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --no-loadscope-reorder -p tests.slow_first tests

# Each notebook's cells against their committed outputs, then its student edition from the
# first exercise on in the same kernel (tests/nbval_student.py; make student-test runs the
# student edition alone, from the top).
nbval: warm
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --no-loadscope-reorder -p tests.slow_first \
		--nbval --nbval-current-env \
		-p tests.nbval_student --student-edition notebooks

# A clean build each time: Sphinx would not repeat the warnings of unchanged pages.
build: warm
	rm -rf _build/html _build/.doctrees
	$(BIN)/python -m scripts.live_states --jobs $(JOBS)
	$(BIN)/jupyter-book build . -W -n --keep-going
	$(BIN)/python -m tests.e2e.check_site _build/html
	@echo "本: $(CURDIR)/_build/html/index.html"

# The student edition: every chapter of _toc.yml without solutions, in student/ (git-ignored).
student: $(STAMP)
	$(BIN)/python -m scripts.make_student student

# Grade a folder of submitted notebooks (any names, chapters mixed) with the self-checks:
# grades/grades.csv, grades/grades.html and a summary here. The submissions are only read.
grade: warm
	@test -n "$(SUBMISSIONS)" || { echo "使い方: make grade SUBMISSIONS=提出物のフォルダー"; exit 2; }
	$(BIN)/python -m scripts.grade "$(SUBMISSIONS)" --out grades

# Build the student edition, prove no solution is left and run every notebook top to bottom,
# each in a kernel of its own (make test checks the same inside nbval, sharing the cells
# before each chapter's first exercise with the full notebook's run).
student-test: warm
	$(BIN)/python -m scripts.make_student --test --jobs $(JOBS) student

# Strict nbval again at lower CPU levels than this machine's (AVX2 without AVX-512, AVX, numpy's
# baseline), chosen with NPY_DISABLE_CPU_FEATURES and OPENBLAS_CORETYPE and verified inside each
# notebook's kernel: a committed output must not depend on the CPU's SIMD kernels.
test-portable: warm
	$(BIN)/python -m tests.e2e.portable

# The real-browser test: every page of the built book in headless Chromium (Debian's
# /usr/bin/chromium, driven by Playwright). MathJax comes from tests/browser (npm ci), in
# place of the CDN the published book uses. Screenshots go to screenshots/.
BROWSER_DEPS := tests/browser/node_modules/.package-lock.json
$(BROWSER_DEPS): tests/browser/package.json tests/browser/package-lock.json
	cd tests/browser && npm ci --no-audit --no-fund

test-browser: build $(BROWSER_DEPS)
	$(BIN)/python -m tests.e2e.browser_test _build/html

# The same test on the _build/html that a strict build of this run already wrote (.ci/run,
# right after make test): the book is not built twice. Alone, use make test-browser.
test-browser-built: $(BROWSER_DEPS)
	$(BIN)/python -m tests.e2e.browser_test _build/html

# The numpy code against PyTorch and transformers (tests/parity), in an environment of its own:
# the reader's environment and make test need neither (torch alone is over 1 GB).
PARITY := .venv-parity
$(PARITY)/.installed: requirements-parity.txt requirements.txt pyproject.toml
	test -x $(PARITY)/bin/python || $(PYTHON) -m venv $(PARITY)
	$(PARITY)/bin/python -m pip install --quiet --upgrade pip
	$(PARITY)/bin/python -m pip install --quiet -r requirements-parity.txt
	touch $@

test-parity: $(PARITY)/.installed
	$(PARITY)/bin/python -m pytest -q tests/parity

# The live figures with a kernel: JupyterLab (temporary settings, a copy of notebooks/) in
# headless Chromium; every control of every widget-tagged cell moved, the picture must change.
# Then the student edition opened there: no MyST in any rendered markdown cell, citations as
# 著者（年） links (tests/e2e/lab_markdown_test.py).
# Screenshots go to screenshots/lab/.
test-lab: warm
	$(BIN)/python -m tests.e2e.lab_widget_test
	$(BIN)/python -m tests.e2e.lab_markdown_test

# Publish the book: the strict build above (target build), then _build/html to the gh-pages
# branch of REMOTE with ghp-import, as one more commit, and the pages' URL from _config.yml.
# scripts/publish.py refuses, before building, when REMOTE is missing or notebooks/ or
# src/attnlab have uncommitted changes. PUBLISH_BUILD: tests/test_publish.py swaps in a fake.
REMOTE = origin
PUBLISH_BUILD = $(MAKE) --no-print-directory build
publish: $(STAMP)
	$(BIN)/python -m scripts.publish --remote "$(REMOTE)" --build "$(PUBLISH_BUILD)"

notebooks: warm
	$(BIN)/python -m scripts.run_notebooks

# The first code cell of every chapter installs attnlab in Colab from repository.url and
# repository.branch of _config.yml: after a fork changes them, rewrite the cells (a cell
# without outputs: no make notebooks, unless the script says it inserted a cell). make test
# fails while a cell and _config.yml disagree.
colab-cell: $(STAMP)
	$(BIN)/python -m scripts.sync_colab_cell

lab: warm
	$(BIN)/jupyter lab notebooks

# Japanese typography of every Markdown cell of _toc.yml's notebooks and every page in book/:
# one line per paragraph, no space between Japanese characters (whitespace only; tests/test_typography.py).
typography: $(STAMP)
	$(BIN)/python -m scripts.ja_typography --fix

# The time budgets: each chapter's Run All and the phases of make test, printed (not a test).
budgets: warm
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m benchmarks.budgets --chapters --test

# Studies (attnlab.studies): experiments at the scale their conclusions need, run on every
# core (one BLAS thread per process) and written to notebooks/studies/NAME.json; commit it.
STUDY_RUN = OPENBLAS_NUM_THREADS=1 nice -n 10 $(BIN)/python -m attnlab.studies
studies: $(STAMP)
	$(STUDY_RUN) --all

study-length_generalization: $(STAMP)
	$(STUDY_RUN) length_generalization

clean:
	rm -rf _build student grades screenshots .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(PARITY) tests/browser/node_modules
