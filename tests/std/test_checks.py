"""The launch sizes of ``cubeplug.std.checks`` that several ops share (no device needed)."""

from __future__ import annotations

from typing import Any

from cubeplug.std import checks
from cubeplug.std.combine import SUM
from cubeplug.std.reduction import CUBE, ILP, Strategy


def test_capped_groups_caps_the_cubes_unless_units_would_loop_past_the_limit() -> None:
    assert checks.capped_groups(1000, 256, 4, 256) == 4  # 4 groups: the cap is not reached
    assert checks.capped_groups(1000, 100, 4, 256) == 4  # 10 groups, capped at 4
    assert checks.capped_groups(999, 1000, 4, 256) == 1
    limit = 4 * 256 * checks.MAX_PER_UNIT  # 4 cubes of 256 units loop MAX_PER_UNIT times each
    assert checks.capped_groups(limit, 256, 4, 256) == 4
    assert checks.capped_groups(limit + 1, 256, 4, 256) == 5  # a fifth cube, not a longer loop


class _Client:
    properties: dict[str, Any] = {"sm_count": 2}


def test_resident_reduction_takes_one_wave_of_cubes() -> None:
    resident = Strategy(SUM, "f32", 4, ILP, resident=True)
    assert resident.cubes(_Client(), 10**6) == 16  # 8 cubes a compute unit
    assert resident.cubes(_Client(), 1000) == 1
    assert Strategy(SUM, "f32", 4, ILP).cubes(_Client(), 10**6) == -(-10**6 // (CUBE * 4))


def test_cube_count_goes_2d_beyond_max_groups() -> None:
    one = checks.cube_count(checks.MAX_GROUPS)
    assert (one.x, one.y, one.z) == (checks.MAX_GROUPS, 1, 1)
    two = checks.cube_count(checks.MAX_GROUPS + 1)
    assert (two.x, two.y, two.z) == (checks.MAX_GROUPS, 2, 1)  # the last cube in the second row
