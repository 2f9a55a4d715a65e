"""A second process reuses the choice the first one persisted, without benchmarking (real CPU backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CODE = """
import json, numpy as np
import cubeplug.std as std
from cubeplug.backends.cpu.server import CpuServer
from cubeplug.backends.cpu.storage import CpuStorage
from cubeplug.core.client import ComputeClient
from cubeplug.core.tune import tuner_for
client = ComputeClient(CpuServer(CpuStorage()))
x = client.create(np.ones(100003, np.float32))
value = float(client.to_numpy(std.reduce_sum(client, x, 100003), "f32")[0])
tuner = tuner_for(client, std.REDUCE_SUM)
result = tuner.results[std.REDUCE_SUM.key(client, tuner.level, x, 100003)]
print(json.dumps({"value": value, "fastest": result.fastest, "source": result.source,
                  "tunings": tuner.stats.tunings, "persistent_hits": tuner.stats.persistent_hits,
                  "runs": tuner.stats.runs}))
client.close()
"""


def _run(cache: Path) -> dict[str, object]:
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "CUBEPLUG_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_second_process_reuses_the_persisted_choice(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert first["value"] == 100003.0 and first["source"] == "tuned"
    assert first["tunings"] == 1 and first["runs"] > 0 and first["persistent_hits"] == 0
    second = _run(tmp_path)
    assert second["value"] == 100003.0 and second["source"] == "persistent"
    assert second["fastest"] == first["fastest"]
    assert (second["tunings"], second["persistent_hits"], second["runs"]) == (0, 1, 0)
    assert (tmp_path / "autotune.sqlite3").is_file()
