"""Not taught: studies — experiments at the scale their conclusions need, run offline.

A chapter's Run All must stay within seconds, but some conclusions need more: many
seeds, training until the accuracy stops rising, several tasks. Such an experiment is a
*study*: a function of ``attnlab.experiments.<chapter>`` with a config dict (tasks,
methods, seeds, steps, sizes), registered here in :data:`STUDIES`. It is run once, at
full scale, by ``make study-NAME`` (``python -m attnlab.studies NAME``; ``make studies``
runs them all), which writes a small JSON artefact ``notebooks/studies/NAME.json``
beside the notebooks and commits nothing by itself. The chapter reads it with
:func:`load_study` (no training) and shows its tables and figures.

The artefact holds the results, the config, the versions of attnlab and numpy, the
BLAS libraries threadpoolctl finds, the wall time and the date. JSON only: no pickles.

A study declares (:class:`Study`):

- ``run(config) -> records``: every independent run of the study, e.g. one (task,
  method, seed); a record is ``{"key": {...}, "values": {quantity: number or list}}``.
  The study spreads its runs over the CPU cores itself.
- ``check(config) -> config``: the config's validation (a Japanese ValueError).
- ``replay(config) -> config``: the config of its cheapest run(s) (a sub-config of the
  stored one: same settings, fewer keys), recomputed by :func:`replay_study`.
- ``tolerances``: quantity → the absolute tolerance of a replay on another machine,
  justified where the study defines it. On the machine that made the artefact (same
  numpy, same BLAS library and CPU kernel), the replay must agree exactly.

A bad or stale artefact is an error, never a silent fallback: :func:`load_study` raises
a ValueError naming the file and what is wrong (missing, not JSON, wrong schema, another
study, a config that no longer validates or is no longer the study's config).
"""

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: The artefact's format; a change that old artefacts cannot be read with bumps it.
SCHEMA = 1
#: The registered studies: name → "module:attribute" of its :class:`Study`.
STUDIES = {
    "length_generalization": "attnlab.experiments.length_generalization:LENGTH_STUDY",
}
#: Where the artefacts live: ``notebooks/studies`` of the repository.
STUDY_DIR = Path(__file__).resolve().parents[2] / "notebooks" / "studies"
#: The keys of an artefact, each with its JSON type.
ARTEFACT_KEYS = {"schema": int, "study": str, "config": dict, "records": list,
                 "attnlab": str, "numpy": str, "blas": list, "python": str,
                 "machine": str, "wall_seconds": (int, float), "date": str}


@dataclasses.dataclass(frozen=True)
class Study:
    """A study: what :func:`run_study` runs and :func:`replay_study` replays.

    Attributes
    ----------
    name : str
        The key of :data:`STUDIES`; the artefact is ``notebooks/studies/{name}.json``.
    run : callable
        ``run(config) -> list of records``, each ``{"key": dict, "values": dict}`` of
        JSON numbers, strings and lists.
    config : dict
        The full-scale config ``make study-NAME`` runs.
    check : callable
        ``check(config) -> config``: raises a Japanese ValueError for a bad config.
    replay : callable
        ``replay(config) -> config``: the config of the cheapest run(s) to recompute.
    tolerances : dict
        Quantity (a key of ``values``, or its family: the part before ``/``) → absolute
        tolerance of a replay made on another machine; a quantity without one must agree
        exactly.

    Not taught: the record of one study.
    """

    name: str
    run: Callable[[dict], list]
    config: dict
    check: Callable[[dict], dict]
    replay: Callable[[dict], dict]
    tolerances: dict


def get_study(name: str) -> Study:
    """The registered :class:`Study` called ``name``.

    Not taught: a look-up in :data:`STUDIES`.
    """
    if name not in STUDIES:
        raise ValueError(f"name={name!r} という研究はありません: {sorted(STUDIES)} のどれかです")
    module, attribute = STUDIES[name].split(":")
    study = getattr(importlib.import_module(module), attribute)
    if not isinstance(study, Study) or study.name != name:
        raise ValueError(f"{STUDIES[name]} は name={name!r} の Study ではありません")
    return study


def study_path(name: str) -> Path:
    """``notebooks/studies/{name}.json`` of the repository attnlab is installed from
    (``pip install -e .``), or else ``studies/{name}.json`` beside the running notebook
    (the current directory), if that exists.

    Not taught: where an artefact lives.
    """
    here = STUDY_DIR / f"{name}.json"
    beside = Path.cwd() / "studies" / f"{name}.json"
    return beside if not here.is_file() and beside.is_file() else here


def _blas_info() -> list[dict]:
    """The BLAS libraries numpy uses, as threadpoolctl reports them (no file paths)."""
    from threadpoolctl import threadpool_info

    keep = ("user_api", "internal_api", "version", "architecture", "threading_layer",
            "num_threads")
    return [{key: info.get(key) for key in keep} for info in threadpool_info()
            if info.get("user_api") == "blas"]


def _fingerprint(artefact: dict) -> tuple:
    """What must match for a replay to be exact: numpy, the BLAS kernel, the CPU type."""
    blas = [(b.get("internal_api"), b.get("version"), b.get("architecture"))
            for b in artefact["blas"]]
    return artefact["numpy"], tuple(blas), artefact["machine"]


def _json_ready(value):
    """``value`` with numpy numbers and arrays as JSON numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_ready(value.tolist())
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return None if math.isnan(value) else value  # JSON has no NaN: null
    return value


def run_study(name: str, *, config: dict | None = None, path: Path | None = None) -> dict:
    """Run the study ``name`` at full scale and write its artefact (JSON).

    Parameters
    ----------
    name : str
        A key of :data:`STUDIES`.
    config : dict, optional
        The study's own config by default; another (e.g. smaller, for a test) is
        validated by the study's ``check``.
    path : Path, optional
        Where to write; ``notebooks/studies/{name}.json`` by default.

    Returns
    -------
    dict
        The artefact as written.

    Not taught: ``make study-NAME`` calls it.
    """
    study = get_study(name)
    config = study.check(study.config if config is None else config)
    from attnlab import __version__

    start = time.perf_counter()
    records = study.run(config)
    wall = time.perf_counter() - start
    artefact = {
        "schema": SCHEMA, "study": name, "config": _json_ready(config),
        "records": _json_ready(records), "attnlab": __version__, "numpy": np.__version__,
        "blas": _blas_info(), "python": platform.python_version(),
        "machine": platform.machine(), "wall_seconds": round(wall, 1),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    path = study_path(name) if path is None else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(artefact, ensure_ascii=False, indent=1, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return artefact


def load_study(name: str, *, path: Path | None = None) -> dict:
    """The artefact of the study ``name``, checked.

    Raises a ValueError (Japanese, naming the file, what is wrong and ``make study-NAME``)
    when the file is missing or not JSON, its schema or keys are wrong, it belongs to
    another study, its config no longer validates, or it is not the study's config any
    more (the code changed what the study runs). Nothing falls back silently.

    Returns
    -------
    dict
        The artefact: ``config``, ``records`` (each ``{"key": …, "values": …}``) and the
        versions, wall time and date of the run.

    Chapters 10 and 11 read chapter 10's study with it.

    Taught in chapter 10.
    """
    study = get_study(name)
    path = study_path(name) if path is None else Path(path)
    again = f"make study-{name} で作り直してください"
    if not path.is_file():
        raise ValueError(f"研究 {name!r} の結果 {path} がありません: {again}")
    try:
        artefact = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} は JSON として読めません ({error}): {again}") from None
    if not isinstance(artefact, dict):
        raise ValueError(f"{path} の中身が辞書ではありません: {again}")
    if artefact.get("schema") != SCHEMA:
        raise ValueError(f"{path} の schema={artefact.get('schema')!r} が {SCHEMA} では"
                         f"ありません: {again}")
    for key, kind in ARTEFACT_KEYS.items():
        if not isinstance(artefact.get(key), kind):
            raise ValueError(f"{path} の {key!r} がないか、型が違います: {again}")
    if artefact["study"] != name:
        raise ValueError(f"{path} は研究 {artefact['study']!r} の結果で、{name!r} ではありません")
    for i, record in enumerate(artefact["records"]):
        if not (isinstance(record, dict) and isinstance(record.get("key"), dict)
                and isinstance(record.get("values"), dict)):
            raise ValueError(f"{path} の records[{i}] に key と values の辞書がありません: {again}")
    try:
        config = study.check(artefact["config"])
    except ValueError as error:
        raise ValueError(f"{path} の config が今のコードでは通りません ({error}): "
                         f"{again}") from None
    if _json_ready(config) != _json_ready(study.check(study.config)):
        raise ValueError(f"{path} の config が研究 {name!r} の今の config と違います: {again}")
    return artefact


def replay_study(name: str, *, path: Path | None = None) -> tuple[list, list]:
    """Recompute the study's cheapest run(s) from the stored config.

    The study's ``replay`` picks a sub-config (e.g. one task, one method, one seed);
    it is run again here, in this process, and compared by the caller (see
    :func:`replay_differences`).

    Returns
    -------
    stored, recomputed : list of dict
        The artefact's records of those runs and the same records computed now.

    Not taught: the test that keeps an artefact in step with the code calls it.
    """
    study = get_study(name)
    artefact = load_study(name, path=path)
    sub_config = study.check(study.replay(artefact["config"]))
    recomputed = _json_ready(study.run(sub_config))
    wanted = {json.dumps(r["key"], sort_keys=True) for r in recomputed}
    stored = [r for r in artefact["records"] if json.dumps(r["key"], sort_keys=True) in wanted]
    return stored, recomputed


def replay_differences(name: str, stored: list, recomputed: list, *,
                       exact: bool) -> list[str]:
    """Where a replay differs from the artefact: one line per quantity, empty if none.

    ``exact``: every number must be equal (the machine that made the artefact);
    otherwise each quantity within its tolerance of the study's ``tolerances`` (a
    quantity without one must still be equal).

    Not taught: the comparison of :func:`replay_study`'s two lists.
    """
    study = get_study(name)
    by_key = {json.dumps(r["key"], sort_keys=True): r["values"] for r in stored}
    problems = []
    if len(recomputed) != len(stored):
        problems.append(f"記録の数が違います: 保存 {len(stored)}, 再計算 {len(recomputed)}")
    for record in recomputed:
        key = json.dumps(record["key"], sort_keys=True)
        if key not in by_key:
            problems.append(f"{key}: 保存された結果にありません")
            continue
        old = by_key[key]
        for quantity, value in record["values"].items():
            if quantity not in old:
                problems.append(f"{key} {quantity}: 保存された結果にありません")
                continue
            a = np.asarray(old[quantity], dtype=float)
            b = np.asarray(value, dtype=float)
            if a.shape != b.shape:
                problems.append(f"{key} {quantity}: 形が違います {a.shape} と {b.shape}")
                continue
            tolerance = 0.0 if exact else _tolerance(study, quantity)
            gap = np.abs(a - b)
            same_nan = np.isnan(a) & np.isnan(b)
            if not np.all(same_nan | (gap <= tolerance)):
                worst = float(np.nanmax(np.where(same_nan, 0.0, gap)))
                problems.append(f"{key} {quantity}: 最大の差 {worst:.3g} > 許容 {tolerance:g}")
    return problems


def _tolerance(study: Study, quantity: str) -> float:
    """The study's tolerance of a quantity: its own, or that of its family (the part before
    ``/``, e.g. ``accuracy`` for ``accuracy/RoPE+PI``), or 0."""
    family = quantity.split("/")[0]
    return float(study.tolerances.get(quantity, study.tolerances.get(family, 0.0)))


def replay_is_exact(name: str, *, path: Path | None = None) -> bool:
    """True when this process runs what made the artefact (numpy, BLAS kernel, machine):
    a replay must then agree bit for bit.

    Not taught: which comparison :func:`replay_differences` makes.
    """
    here = {"numpy": np.__version__, "blas": _blas_info(), "machine": platform.machine()}
    return _fingerprint(load_study(name, path=path)) == _fingerprint(here)


def main(argv=None) -> int:
    """``python -m attnlab.studies NAME …`` (or ``--all``): run and write each artefact.

    Not taught: ``make studies`` and ``make study-NAME`` call it.
    """
    parser = argparse.ArgumentParser(
        prog="python -m attnlab.studies",
        description="研究を全規模で実行し notebooks/studies/ に書きます")
    parser.add_argument("names", nargs="*", help=f"研究の名前: {', '.join(STUDIES)}")
    parser.add_argument("--all", action="store_true", help="登録されたすべての研究")
    args = parser.parse_args(argv)
    names = list(STUDIES) if args.all else args.names
    if not names:
        parser.error("研究の名前か --all を指定してください")
    for name in names:
        get_study(name)  # every name checked before the first long run
    for name in names:
        print(f"{name}: 実行中 (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')})",
              flush=True)
        artefact = run_study(name)
        print(f"{name}: {len(artefact['records'])} 件, {artefact['wall_seconds']} 秒 → "
              f"{study_path(name)}", flush=True)
    return 0


if __name__ == "__main__":
    # run as attnlab.studies, not __main__: the studies' Study is that module's class
    from attnlab.studies import main as studies_main

    sys.exit(studies_main())
