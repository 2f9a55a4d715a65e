"""A fake client whose profile() reports deterministic noisy times per candidate, for tuner tests."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from cubeplug.core.config import Config
from cubeplug.core.profile import ProfileDuration
from cubeplug.core.tune import AutotuneKey, Tunable, TunableSet, anchor


class FakeClient:
    """Candidates say which one ran; profile() answers its true time with seeded noise and outliers."""

    backend = "fake"

    def __init__(
        self,
        times: Mapping[str, float],
        *,
        noise: float = 0.03,
        outliers: float = 0.05,
        seed: int = 0,
        config: Config | None = None,
        name: str = "fake device",
    ) -> None:
        self.times = dict(times)
        self.noise = noise
        self.outliers = outliers
        self.rng = random.Random(seed)
        self.device = SimpleNamespace(name=name, index=0)
        self.capabilities = SimpleNamespace(atomics=True)
        self.config = config or Config()
        self.calls: Counter[str] = Counter()
        self.profiled: Counter[str] = Counter()
        self.last = ""

    @property
    def server(self) -> FakeClient:
        return self

    def sync(self) -> None:
        pass

    def profile(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, ProfileDuration]:
        out = fn(*args)
        self.profiled[self.last] += 1
        t = self.times[self.last] * (1.0 + self.rng.gauss(0.0, self.noise))
        if self.rng.random() < self.outliers:
            t *= 3.0
        return out, ProfileDuration(max(t, 1e-9), "device")


def candidate(name: str) -> Callable[..., Any]:
    """A candidate that records its run and returns its name."""

    def run(client: FakeClient, n: int) -> str:
        client.last = name
        client.calls[name] += 1
        return name

    return run


def key_of(client: Any, level: str, n: int) -> AutotuneKey:
    """The fake set's key: the anchored size."""
    return AutotuneKey(("n", anchor(n, level)))


def fake_set(names: list[str], name: str = "test.fake", **kwargs: Any) -> TunableSet:
    """A tunable set of fake candidates (priority 2, so every level tries them)."""
    return TunableSet(name, [Tunable(n, candidate(n), priority=2) for n in names], key_of, **kwargs)
