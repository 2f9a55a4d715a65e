"""The tuner: score, elimination, failures, output checks, levels, settings and the progress bar."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

from cubeplug import ConfigError, CubeplugError, ValidationError
from cubeplug.core.config import Config
from cubeplug.core.tune import (
    LEVEL_SETTINGS,
    AutotuneKey,
    BenchSettings,
    Tunable,
    TunableSet,
    Tuner,
    autotune,
    bench_settings,
    score,
    tuner_for,
)
from cubeplug.core.tune import progress as progress_module
from tests.core.tune.fakes import FakeClient, candidate, fake_set, key_of

TIMES = {
    "a": 1.00e-3,
    "b": 1.03e-3,
    "c": 1.09e-3,
    "d": 1.2e-3,
    "e": 1.5e-3,
    "f": 2.0e-3,
    "g": 3.0e-3,
    "h": 5.0e-3,
    "i": 8.0e-3,
    "j": 13e-3,
}


def _tuner(level: str = "balanced", **bench: Any) -> Tuner:
    return Tuner(
        "test.fake", "fake:device", level=level, settings=bench_settings(level, {"progress": False, **bench})
    )


def test_score_formula() -> None:
    samples = [1.0, 2.0, 3.0, 4.0]
    mean, std = 2.5, math.sqrt(1.25)
    assert score(samples) == pytest.approx((0.8 * 1.0 + 0.2 * 2.5) * (1 + std / mean))
    assert score([2.0]) == pytest.approx(2.0)
    assert score([]) == math.inf
    # A steady candidate beats a jittery one with the same best time.
    assert score([1.0, 1.0, 1.0]) < score([1.0, 1.5, 3.0])


@pytest.mark.parametrize("seed", range(20))
def test_autotune_picks_within_5_percent_of_the_exhaustive_best(seed: int) -> None:
    client = FakeClient(TIMES, seed=seed)
    tunables = fake_set(list(TIMES))
    tuner = _tuner()
    chosen = tuner.tune(tunables, client, key_of(client, "balanced", 1000), (1000,)).fastest
    exhaustive = tuner.measure_all(tunables, client, 1000, samples=30)
    best = min(exhaustive, key=lambda o: o.median)
    assert best.name == "a" and all(o.status == "ok" for o in exhaustive)
    assert TIMES[chosen] <= 1.05 * TIMES[best.name], (chosen, seed)


def test_elimination_stops_measuring_clearly_slow_candidates() -> None:
    client = FakeClient(TIMES, noise=0.01, outliers=0.0)
    tuner = _tuner(samples=10)
    result = tuner.tune(fake_set(list(TIMES)), client, key_of(client, "balanced", 8), (8,))
    statuses = {o.name: o.status for o in result.outcomes}
    assert statuses["a"] == "ok" and statuses["b"] == "ok"
    assert {statuses[n] for n in "fghij"} == {"eliminated"}
    assert client.profiled["j"] == 2 and client.profiled["a"] == 10
    full = _tuner("full", samples=10)
    client = FakeClient(TIMES, noise=0.01, outliers=0.0)
    result = full.tune(fake_set(list(TIMES)), client, key_of(client, "full", 8), (8,))
    assert all(o.status == "ok" for o in result.outcomes) and client.profiled["j"] == 10


def test_failing_candidates_are_skipped_and_all_failing_raises() -> None:
    def broken(client: Any, n: int) -> None:
        raise ValidationError("this candidate cannot run")

    client = FakeClient(TIMES)
    tunables = TunableSet("t", [Tunable("bad", broken, 2), Tunable("a", candidate("a"), 2)], key_of)
    result = _tuner().tune(tunables, client, key_of(client, "balanced", 3), (3,))
    assert result.fastest == "a"
    bad = next(o for o in result.outcomes if o.name == "bad")
    assert bad.status == "failed" and "cannot run" in bad.error
    only_bad = TunableSet("t2", [Tunable("bad", broken, 2), Tunable("worse", broken, 2)], key_of)
    with pytest.raises(CubeplugError, match="every candidate"):
        _tuner().tune(only_bad, client, key_of(client, "balanced", 3), (3,))


def test_a_single_candidate_is_not_benchmarked() -> None:
    client = FakeClient(TIMES)
    result = _tuner().tune(fake_set(["c"]), client, key_of(client, "balanced", 3), (3,))
    assert result.fastest == "c" and result.source == "single" and sum(client.profiled.values()) == 0


def test_no_runnable_candidate_is_a_validation_error() -> None:
    client = FakeClient(TIMES)
    never = TunableSet("t", [Tunable("a", candidate("a"), 2, applicable=lambda c, k: False)], key_of)
    with pytest.raises(ValidationError, match="no candidate"):
        _tuner().tune(never, client, key_of(client, "balanced", 3), (3,))


def test_levels_pick_candidates_by_priority() -> None:
    client = FakeClient(TIMES)
    tunables = TunableSet(
        "t",
        [Tunable("a", candidate("a"), 0), Tunable("b", candidate("b"), 1), Tunable("c", candidate("c"), 2)],
        key_of,
    )
    key = AutotuneKey(("n", 4))
    names = {
        lv: [t.name for t in tunables.candidates(client, key, LEVEL_SETTINGS[lv].min_priority)]
        for lv in LEVEL_SETTINGS
    }
    assert names == {
        "minimal": ["c"],
        "balanced": ["b", "c"],
        "extensive": ["a", "b", "c"],
        "full": ["a", "b", "c"],
    }
    gated = TunableSet(
        "t", [Tunable("a", candidate("a"), 0), Tunable("b", candidate("b"), 2, lambda c, k: False)], key_of
    )
    assert [t.name for t in gated.candidates(client, key, 2)] == ["a"]  # nothing at priority 2 can run


def test_output_checks_exclude_a_wrong_candidate_with_a_warning() -> None:
    def compare(client: Any, expected: str, got: str, n: int) -> str | None:
        return None if got != "wrong" else "got the wrong answer"

    def wrong(client: FakeClient, n: int) -> str:
        client.last = "a"
        return "wrong"

    client = FakeClient(TIMES)
    tunables = TunableSet(
        "t",
        [Tunable("b", candidate("b"), 2), Tunable("wrong", wrong, 2)],
        key_of,
        compare=compare,
        reference=lambda client, n: "right",
    )
    with pytest.warns(RuntimeWarning, match="candidate wrong is wrong"):
        result = _tuner(check=True).tune(tunables, client, key_of(client, "balanced", 3), (3,))
    assert result.fastest == "b"
    assert next(o for o in result.outcomes if o.name == "wrong").status == "mismatch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tuner().tune(tunables, client, key_of(client, "balanced", 3), (3,)).fastest == "wrong"


def test_execute_keys_inputs_and_remembers_the_choice() -> None:
    client = FakeClient(TIMES)
    tunables = fake_set(["c", "a", "e"], name="test.execute")
    tuner = _tuner(samples=5)
    assert tuner.execute(tunables, client, 1000) == "a"
    runs = tuner.stats.runs
    assert tuner.execute(tunables, client, 900) == "a"  # same bucket (1024): no tuning
    assert tuner.stats.runs == runs and tuner.stats.memory_hits == 1 and tuner.stats.tunings == 1
    tuner.execute(tunables, client, 5000)  # another bucket: tuned
    assert tuner.stats.tunings == 2
    assert set(tuner.results) == {AutotuneKey(("n", 1024)), AutotuneKey(("n", 8192))}


def test_autotune_makes_one_tuner_per_device_from_its_config() -> None:
    config = Config()
    config.autotune.level = "full"
    config.autotune.cache = False
    config.autotune.bench = {"samples": 3, "progress": False}
    client = FakeClient(TIMES, config=config)
    tunables = fake_set(["b", "a"], name="test.per-device")
    assert autotune(client, tunables, 1000) == "a"
    tuner = tuner_for(client, tunables)
    assert tuner.level == "full" and tuner.settings.samples == 3 and tuner.cache.persistent is None
    assert AutotuneKey(("n", 1000)) in tuner.results  # full: exact sizes
    other = FakeClient(TIMES, config=config, name="another")
    assert tuner_for(other, tunables) is not tuner


def test_bench_settings_from_config() -> None:
    assert bench_settings("minimal") == LEVEL_SETTINGS["minimal"]
    s = bench_settings(
        "balanced", {"samples": 4, "warmup": 0, "eliminate": 0, "check": True, "max_seconds": 0.5}
    )
    assert (s.samples, s.warmup, s.eliminate, s.check, s.max_seconds) == (4, 0, 0.0, True, 0.5)
    for bad in ({"samples": 0}, {"eliminate": 0.5}, {"check": "yes"}, {"max_seconds": -1}, {"warmup": 1.5}):
        with pytest.raises(ConfigError, match="autotune.bench"):
            bench_settings("balanced", bad)
    with pytest.raises(ConfigError, match="unknown key autotune.bench.nope"):
        bench_settings("balanced", {"nope": 1})


def test_config_file_and_environment_reach_the_tuner(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.registry.settings import load_config

    (tmp_path / "cubeplug.toml").write_text(
        '[autotune]\nlevel = "extensive"\ncache = false\n[autotune.bench]\nsamples = 2\n'
    )
    eff = load_config(
        cwd=tmp_path, env={"CUBEPLUG_AUTOTUNE_BENCH_CHECK": "true"}, user_path=tmp_path / "none.toml"
    )
    client = FakeClient(TIMES, config=eff.config)
    tuner = tuner_for(client, fake_set(["a", "b"], name="test.config"))
    assert tuner.level == "extensive" and tuner.settings.samples == 2 and tuner.settings.check is True
    assert tuner.cache.persistent is None


def test_progress_bar_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress_module, "is_terminal", lambda: True)
    client = FakeClient(TIMES)
    tuner = Tuner("test.fake", "fake", settings=BenchSettings(samples=3, progress=True))
    assert tuner.tune(fake_set(["a", "b"]), client, key_of(client, "balanced", 3), (3,)).fastest == "a"
    with progress_module.progress_bar("x", 3, enabled=False) as bar:
        bar.advance(1)  # silent


def test_plain_progress_without_rich(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_rich(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("rich"):
            raise ImportError("no rich here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(progress_module, "is_terminal", lambda: True)
    monkeypatch.setattr(builtins, "__import__", no_rich)
    with progress_module.progress_bar("tuning", 4) as bar:
        bar.advance(2, "cand")
    assert "tuning:  50% cand" in capsys.readouterr().err
