"""The red zones' geometry and configuration (their behaviour runs on every backend in the
conformance suite: cubeplug/testing/suite/guard.py)."""

from __future__ import annotations

import pytest

from cubeplug.core.errors import ConfigError
from cubeplug.core.memory.guard import ZONE_MIN, RedZones
from cubeplug.registry.settings import load_config


@pytest.mark.parametrize(
    ("alignment", "zone"), [(1, ZONE_MIN), (4, ZONE_MIN), (256, 256), (384, 384), (4096, 4096)]
)
def test_a_zone_is_at_least_the_minimum_and_keeps_the_view_aligned(alignment: int, zone: int) -> None:
    zones = RedZones(alignment)
    assert zones.zone == zone and zones.zone % alignment == 0
    assert zones.extra() == 2 * zone


def test_guard_is_off_by_default_and_set_by_env(tmp_path) -> None:  # type: ignore[no-untyped-def]
    user = tmp_path / "none.toml"
    assert load_config(cwd=tmp_path, env={}, user_path=user).config.memory.guard is False
    on = load_config(cwd=tmp_path, env={"CUBEPLUG_MEMORY_GUARD": "1"}, user_path=user)
    assert on.config.memory.guard is True
    with pytest.raises(ConfigError, match="guard"):
        load_config(cwd=tmp_path, env={"CUBEPLUG_MEMORY_GUARD": "maybe"}, user_path=user)
