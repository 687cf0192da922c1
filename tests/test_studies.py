"""attnlab.studies: artefacts are checked when read, and every committed artefact replays.

The replay test recomputes each study's cheapest run (the study's own ``replay`` spec)
from the stored config and compares it with the stored numbers: bit for bit on the
machine that made the artefact (same numpy, BLAS kernel and CPU type), elsewhere within
the study's per-quantity tolerances (justified where the study defines them). When it
fails, the code no longer computes what the artefact holds: re-run ``make study-NAME``.
"""

import copy
import json

import numpy as np
import pytest

from attnlab import studies
from attnlab.experiments.length_generalization import LENGTH_STUDY_CONFIG, _study_run

NAME = "length_generalization"


def tiny_config() -> dict:
    """The study's config at toy scale: 2 kinds, 1 seed, 20 steps (a few seconds)."""
    config = copy.deepcopy(LENGTH_STUDY_CONFIG)
    for spec in config["tasks"].values():
        spec["steps"] = 20
    config.update(kinds=["rope", "t5"], seeds=[3], curve_points=10, eval_rows=4)
    return config


@pytest.fixture(scope="module")
def tiny_artefact(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "tiny.json"
    artefact = studies.run_study(NAME, config=tiny_config(), path=path)
    return path, artefact


def test_run_study_writes_json_with_the_config_versions_and_every_run(tiny_artefact):
    path, artefact = tiny_artefact
    on_disk = json.loads(path.read_text(encoding="utf-8"))  # plain JSON: no NaN, no pickle
    assert on_disk == artefact
    assert on_disk["schema"] == studies.SCHEMA and on_disk["study"] == NAME
    assert on_disk["config"] == tiny_config()
    assert on_disk["numpy"] == np.__version__
    assert on_disk["blas"] and on_disk["blas"][0]["user_api"] == "blas"
    keys = [(r["key"]["task"], r["key"]["kind"], r["key"]["seed"]) for r in on_disk["records"]]
    assert keys == [(t, k, 3) for t in LENGTH_STUDY_CONFIG["tasks"] for k in ("rope", "t5")]
    rope = on_disk["records"][0]["values"]
    assert len(rope["curve"]) == 10
    assert len(rope["accuracy/RoPE+YaRN"]) == len(LENGTH_STUDY_CONFIG["factors"])
    assert "by_period/T5 バイアス" in on_disk["records"][3]["values"]


def test_a_run_on_the_cores_is_the_run_in_this_process(tiny_artefact):
    _, artefact = tiny_artefact
    config = tiny_config()
    record = _study_run(config, artefact["records"][1]["key"])
    assert studies._json_ready(record) == artefact["records"][1]


def _write(path, artefact):
    path.write_text(json.dumps(artefact, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def good(tiny_artefact):
    """A well-formed artefact of the study's own config (records from the tiny run)."""
    artefact = copy.deepcopy(tiny_artefact[1])
    artefact["config"] = copy.deepcopy(LENGTH_STUDY_CONFIG)
    return artefact


def test_a_well_formed_artefact_of_the_current_config_loads(tmp_path, good):
    assert studies.load_study(NAME, path=_write(tmp_path / "a.json", good)) == good


@pytest.mark.parametrize("damage, message", [
    (lambda a: a.update(schema=0), "schema=0"),
    (lambda a: a.pop("blas"), "'blas'"),
    (lambda a: a.update(records={}), "'records'"),
    (lambda a: a.update(records=[{"values": {}}]), r"records\[0\]"),
    (lambda a: a.update(study="other"), "'other'"),
    (lambda a: a["config"].update(seeds=[1, 1]), "通りません"),
    (lambda a: a["config"]["tasks"]["previous_token"].update(steps=500), "今の config と違います"),
])
def test_a_bad_or_stale_artefact_is_an_error_naming_the_file(tmp_path, good, damage, message):
    damage(good)
    path = _write(tmp_path / "bad.json", good)
    with pytest.raises(ValueError, match=message) as info:
        studies.load_study(NAME, path=path)
    assert str(path) in str(info.value)


def test_a_missing_or_unreadable_artefact_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match="がありません") as info:
        studies.load_study(NAME, path=tmp_path / "none.json")
    assert "none.json" in str(info.value) and f"make study-{NAME}" in str(info.value)
    (tmp_path / "x.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="JSON として読めません"):
        studies.load_study(NAME, path=tmp_path / "x.json")


def test_an_unknown_study_is_an_error():
    with pytest.raises(ValueError, match="'nope'"):
        studies.get_study("nope")
    with pytest.raises(SystemExit):
        studies.main(["--help"])
    with pytest.raises(ValueError, match="'nope'"):
        studies.main(["nope"])


def test_replay_differences_finds_a_changed_number_and_respects_tolerances(tiny_artefact):
    records = tiny_artefact[1]["records"][:1]
    assert studies.replay_differences(NAME, records, records, exact=True) == []
    moved = copy.deepcopy(records)
    moved[0]["values"]["accuracy/RoPE+PI"][2] += 0.004
    assert studies.replay_differences(NAME, records, moved, exact=False) == []
    [problem] = studies.replay_differences(NAME, records, moved, exact=True)
    assert "accuracy/RoPE+PI" in problem
    moved[0]["values"]["accuracy/RoPE+PI"][2] += 0.01
    assert studies.replay_differences(NAME, records, moved, exact=False)
    assert studies.replay_differences(NAME, records, [], exact=True)


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_the_committed_artefact_replays(name):
    """The cheapest run of the committed artefact, recomputed now, gives its numbers."""
    stored, recomputed = studies.replay_study(name)
    assert recomputed, f"{name}: the replay ran nothing"
    exact = studies.replay_is_exact(name)
    problems = studies.replay_differences(name, stored, recomputed, exact=exact)
    assert not problems, (
        f"研究 {name!r} の結果 {studies.study_path(name)} が今のコードと合いません"
        f"（{'ビット単位' if exact else '許容差'}で比較）。make study-{name} で作り直して"
        "コミットしてください:\n" + "\n".join(problems))


def test_an_artefact_beside_the_notebook_is_found_when_the_package_is_not_editable(
        tmp_path, monkeypatch):
    monkeypatch.setattr(studies, "STUDY_DIR", tmp_path / "site-packages" / "notebooks")
    monkeypatch.chdir(tmp_path)
    assert studies.study_path(NAME) == studies.STUDY_DIR / f"{NAME}.json"  # neither: named
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / f"{NAME}.json").write_text("{}", encoding="utf-8")
    assert studies.study_path(NAME) == tmp_path / "studies" / f"{NAME}.json"
