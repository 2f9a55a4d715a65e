"""The autotuner (after cubecl-runtime's tuner): benchmark candidates, keep the fastest.

Settings: ``[autotune]`` in docs/config.md.

:func:`autotune` is what an operation calls: it keys the inputs, looks the key up in memory (the
hot path: one dict lookup), then in the persistent cache (checked against the candidates'
checksum), and only then tunes. Tuning runs every runnable candidate ``warmup`` times, then
samples them in interleaved rounds through ``client.profile`` (device timing where the backend
has it); after two rounds, a candidate whose best time is more than ``eliminate`` times the best
candidate's best time stops being measured. The winner has the lowest score
``(0.8 * min + 0.2 * median) * (1 + std / mean)``: fast, and steady. Samples above twice a
candidate's median are outliers (a run interrupted by the OS or another process) and are left
out of its score, so that one interruption does not disqualify the fastest candidate.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cubeplug.core.config import Config
from cubeplug.core.errors import CubeplugError, ValidationError
from cubeplug.core.tune.cache import CacheEntry, Namespace, TuneCache, persistent_cache
from cubeplug.core.tune.key import AutotuneKey
from cubeplug.core.tune.progress import progress_bar
from cubeplug.core.tune.settings import BenchSettings, bench_settings
from cubeplug.core.tune.tunable import Tunable, TunableSet
from cubeplug.core.version import code_version

log = logging.getLogger("cubeplug.tune")

#: Rounds every surviving candidate is sampled before any is eliminated.
MIN_ROUNDS = 2


def score(samples: Sequence[float]) -> float:
    """``(0.8 * min + 0.2 * median) * (1 + std / mean)`` of durations (lower is better)."""
    if not samples:
        return math.inf
    lo = min(samples)
    med = statistics.median(samples)
    mean = statistics.fmean(samples)
    std = statistics.pstdev(samples) if len(samples) > 1 else 0.0
    spread = std / mean if mean > 0 else 0.0
    return (0.8 * lo + 0.2 * med) * (1.0 + spread)


#: Samples above this multiple of a candidate's median are outliers (an interrupted run) and not scored.
OUTLIER_FACTOR = 2.0


def trimmed(samples: Sequence[float]) -> list[float]:
    """The samples without outliers (above ``OUTLIER_FACTOR`` times the median), when there are 3 or more."""
    if len(samples) < 3:
        return list(samples)
    limit = OUTLIER_FACTOR * statistics.median(samples)
    return [s for s in samples if s <= limit]


@dataclass
class Outcome:
    """What tuning learnt of one candidate: its status, samples (seconds) and score."""

    name: str
    status: str = "ok"  # ok | eliminated | failed | mismatch
    samples: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def score(self) -> float:
        """The score of the candidate's samples, outliers left out (infinite when it has none)."""
        return score(trimmed(self.samples))

    @property
    def best(self) -> float:
        """Its fastest sample (infinite when none)."""
        return min(self.samples) if self.samples else math.inf

    @property
    def median(self) -> float:
        """Its median sample (infinite when none)."""
        return statistics.median(self.samples) if self.samples else math.inf

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly summary (times in seconds)."""
        out: dict[str, Any] = {"name": self.name, "status": self.status, "samples": len(self.samples)}
        if self.samples:
            out.update(score=self.score, min=self.best, median=self.median)
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class TuneResult:
    """One tuning: the key, the fastest candidate, every outcome, and how long tuning took."""

    key: AutotuneKey
    fastest: str
    outcomes: tuple[Outcome, ...]
    seconds: float
    source: str = "tuned"  # tuned | persistent | single


@dataclass
class TunerStats:
    """Counters: keys tuned, keys found in memory or on disk, and benchmark runs made."""

    tunings: int = 0
    memory_hits: int = 0
    persistent_hits: int = 0
    runs: int = 0


def device_id(client: Any) -> str:
    """The device part of a cache namespace: ``backend:device name``."""
    device = getattr(client, "device", None)
    name = getattr(device, "name", None) or str(device)
    return f"{getattr(client, 'backend', '?')}:{name}"


class Tuner:
    """Tunes one operation (one TunableSet) on one device and remembers the fastest per key."""

    def __init__(
        self,
        name: str,
        device: str,
        *,
        level: str = "balanced",
        settings: BenchSettings | None = None,
        cache: TuneCache | None = None,
    ) -> None:
        self.name = name
        self.device = device
        self.level = level
        self.settings = settings or bench_settings(level)
        self.cache = cache or TuneCache(Namespace(code_version(), device, name))
        self.stats = TunerStats()
        #: The tuning (or cache load) of each key seen by this process.
        self.results: dict[AutotuneKey, TuneResult] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the hot path
    def execute(self, tunables: TunableSet, client: Any, *inputs: Any) -> Any:
        """Run the fastest candidate for these inputs, tuning first if this key was never tuned."""
        key = tunables.key(client, self.level, *inputs)
        name = self.cache.memory.get(key)
        if name is None:
            name = self.fastest_for(tunables, client, key, inputs)
        else:
            self.stats.memory_hits += 1
        return tunables.by_name[name].fn(client, *inputs)

    def fastest_for(self, tunables: TunableSet, client: Any, key: AutotuneKey, inputs: Sequence[Any]) -> str:
        """The fastest candidate's name for ``key``: from memory, from disk, or tuned now."""
        with self._lock:
            name = self.cache.memory.get(key)
            if name is not None:
                return name
            text = self.key_text(key)
            entry = self.cache.lookup(key, text, tunables.checksum)
            tunable = tunables.by_name.get(entry.fastest) if entry is not None else None
            if entry is not None and tunable is not None and tunable.can_run(client, key):
                self.stats.persistent_hits += 1
                outcomes = tuple(_outcome_from_json(o) for o in entry.outcomes)
                self.results[key] = TuneResult(key, entry.fastest, outcomes, 0.0, "persistent")
                return entry.fastest
            result = self.tune(tunables, client, key, inputs)
            self.results[key] = result
            self.cache.insert(
                key,
                text,
                CacheEntry(result.fastest, tunables.checksum, tuple(o.to_json() for o in result.outcomes)),
            )
            return result.fastest

    def key_text(self, key: AutotuneKey) -> str:
        """The key as stored on disk (the level is part of it)."""
        return f"{self.level}|{key}"

    # ------------------------------------------------------------------ tuning
    def tune(self, tunables: TunableSet, client: Any, key: AutotuneKey, inputs: Sequence[Any]) -> TuneResult:
        """Benchmark the runnable candidates for ``key`` and return the result (nothing is cached)."""
        start = time.perf_counter()
        candidates = tunables.candidates(client, key, self.settings.min_priority)
        if not candidates:
            raise ValidationError(
                f"no candidate of {tunables.name!r} can run {key} on {self.device} "
                f"(candidates: {', '.join(tunables.names)})"
            )
        self.stats.tunings += 1
        if len(candidates) == 1:
            only = Outcome(candidates[0].name)
            return TuneResult(key, only.name, (only,), time.perf_counter() - start, "single")
        outcomes = self.measure(tunables, client, candidates, inputs, self.settings, f"{key}")
        ranked = sorted((o for o in outcomes if o.status == "ok"), key=lambda o: o.score)
        if not ranked:
            failures = "; ".join(f"{o.name}: {o.error}" for o in outcomes)
            raise CubeplugError(f"every candidate of {tunables.name!r} failed for {key}: {failures}")
        fastest = ranked[0].name
        top = ", ".join(f"{o.name} {o.score * 1e3:.3f} ms" for o in ranked[:3])
        log.info("autotune %s %s on %s: fastest %s (top: %s)", tunables.name, key, self.device, fastest, top)
        return TuneResult(key, fastest, tuple(outcomes), time.perf_counter() - start)

    def measure(
        self,
        tunables: TunableSet,
        client: Any,
        candidates: Sequence[Tunable],
        inputs: Sequence[Any],
        settings: BenchSettings,
        label: str = "",
    ) -> list[Outcome]:
        """Warm up, check and sample ``candidates`` under ``settings``; one Outcome each, in order."""
        outcomes = [Outcome(t.name) for t in candidates]
        live: list[tuple[Tunable, Outcome]] = []
        total = len(candidates) * (settings.warmup + settings.samples)
        title = f"autotune {tunables.name} {label}".strip()
        with progress_bar(title, total, settings.progress) as bar:
            reference: Any = None
            have_reference = False
            if settings.check and tunables.reference is not None:
                reference, have_reference = tunables.reference(client, *inputs), True
            for tunable, outcome in zip(candidates, outcomes):
                output = self._warm_up(tunable, outcome, client, inputs, settings.warmup, bar)
                if outcome.status != "ok":
                    bar.advance(settings.samples)
                    continue
                if settings.check and tunables.compare is not None:
                    if not have_reference:
                        reference, have_reference = output, True
                    else:
                        problem = tunables.compare(client, reference, output, *inputs)
                        if problem:
                            outcome.status, outcome.error = "mismatch", str(problem)
                            message = (
                                f"autotune {tunables.name}: candidate {tunable.name} is wrong: {problem}"
                            )
                            log.warning(message)
                            warnings.warn(message, RuntimeWarning, stacklevel=4)
                            bar.advance(settings.samples)
                            continue
                del output
                live.append((tunable, outcome))
            self._sample_rounds(live, client, inputs, settings, bar)
        return outcomes

    def _warm_up(
        self, tunable: Tunable, outcome: Outcome, client: Any, inputs: Sequence[Any], warmup: int, bar: Any
    ) -> Any:
        output = None
        for _ in range(max(1, warmup)):
            try:
                output = tunable.fn(client, *inputs)
                client.sync()
            except Exception as exc:
                outcome.status, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
                log.info("autotune candidate %s failed: %s", tunable.name, outcome.error)
                _recover(client)
                return None
            self.stats.runs += 1
        bar.advance(warmup, tunable.name)
        return output

    def _sample_rounds(
        self,
        live: list[tuple[Tunable, Outcome]],
        client: Any,
        inputs: Sequence[Any],
        settings: BenchSettings,
        bar: Any,
    ) -> None:
        spent = {o.name: 0.0 for _, o in live}
        for round_ in range(settings.samples):
            for tunable, outcome in live:
                if outcome.status != "ok":
                    continue
                if round_ >= MIN_ROUNDS and spent[outcome.name] >= settings.max_seconds:
                    bar.advance(1, tunable.name)
                    continue
                try:
                    _, duration = client.profile(tunable.fn, client, *inputs)
                except Exception as exc:
                    outcome.status, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
                    _recover(client)
                    bar.advance(settings.samples - round_)
                    continue
                self.stats.runs += 1
                seconds = float(duration.seconds())
                outcome.samples.append(seconds)
                spent[outcome.name] += seconds
                bar.advance(1, tunable.name)
            if settings.eliminate and round_ + 1 >= MIN_ROUNDS:
                running = [o for _, o in live if o.status == "ok"]
                if len(running) > 1:
                    best = min(o.best for o in running)
                    for o in running:
                        if o.best > settings.eliminate * best:
                            o.status = "eliminated"
                            bar.advance(settings.samples - round_ - 1)

    def measure_all(
        self, tunables: TunableSet, client: Any, *inputs: Any, samples: int | None = None
    ) -> list[Outcome]:
        """Measure every runnable candidate of every priority with no elimination (an exhaustive check)."""
        key = tunables.key(client, self.level, *inputs)
        candidates = [t for t in tunables.tunables if t.can_run(client, key)]
        plan = BenchSettings(
            warmup=max(1, self.settings.warmup),
            samples=samples or max(self.settings.samples, 10),
            eliminate=0.0,
            max_seconds=math.inf,
            check=False,
            progress=self.settings.progress,
            min_priority=0,
        )
        return self.measure(tunables, client, candidates, inputs, plan, f"{key} (every candidate)")


def _recover(client: Any) -> None:
    """After a failed candidate, clear the error it may have left queued on the client."""
    try:
        client.sync()
    except Exception:
        pass


def _outcome_from_json(data: dict[str, Any]) -> Outcome:
    out = Outcome(str(data.get("name", "?")), str(data.get("status", "ok")), error=str(data.get("error", "")))
    if "min" in data:
        out.samples = [float(data["min"])]
    return out


# ---------------------------------------------------------------------------------------- per device
def tuner_for(client: Any, tunables: TunableSet) -> Tuner:
    """The tuner of ``tunables`` on ``client``'s device, made on first use from the client's config."""
    server = getattr(client, "server", client)
    tuner = tunables.tuners.get(server)
    if tuner is None:
        tuner = new_tuner(client, tunables.name)
        tunables.tuners[server] = tuner
    return tuner


def new_tuner(client: Any, name: str, *, cache_path: Any = None) -> Tuner:
    """A fresh tuner for ``client``: level, settings and persistence from the client's ``[autotune]``."""
    server = getattr(client, "server", client)
    config = getattr(server, "config", None) or Config()
    level = config.autotune.level
    settings = bench_settings(level, config.autotune.bench)
    device = device_id(client)
    persistent = persistent_cache(cache_path) if config.autotune.cache else None
    cache = TuneCache(Namespace(code_version(), device, name), persistent)
    return Tuner(name, device, level=level, settings=settings, cache=cache)


def autotune(client: Any, tunables: TunableSet, *inputs: Any) -> Any:
    """Run the fastest of ``tunables`` on ``inputs`` for ``client``'s device (tuning it the first time)."""
    server = getattr(client, "server", client)
    tuner = tunables.tuners.get(server)
    if tuner is None:
        tuner = tuner_for(client, tunables)
    return tuner.execute(tunables, client, *inputs)
