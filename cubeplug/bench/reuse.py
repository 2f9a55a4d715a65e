"""The second process of the autotune check: run one op through a fresh tuner, print what it did.

    python -m cubeplug.bench.reuse SELECTOR LEVEL OP SIZE

``CUBEPLUG_CACHE_DIR`` names the cache the first process filled. Prints one JSON line: the choice,
where it came from, and the tuner's counters (``tunings`` and ``benchmark_runs`` are 0 on reuse).
"""

from __future__ import annotations

import json
import sys
import time

from cubeplug.bench.autotune_check import op_inputs
from cubeplug.bench.clients import make_client
from cubeplug.core.tune import new_tuner


def main(argv: list[str] | None = None) -> int:
    """Run the op once and print the tuner's account as JSON."""
    selector, level, op, size = argv if argv is not None else sys.argv[1:]
    client = make_client(selector, autotune={"level": level, "bench": {"progress": False}})
    tunables, inputs = op_inputs(client, op, int(size))
    tuner = new_tuner(client, tunables.name)
    t0 = time.perf_counter()
    tuner.execute(tunables, client, *inputs)
    client.sync()
    key = tunables.key(client, tuner.level, *inputs)
    result = tuner.results.get(key)
    print(
        json.dumps(
            {
                "fastest": result.fastest if result else tuner.cache.fastest(key),
                "source": result.source if result else "memory",
                "tunings": tuner.stats.tunings,
                "persistent_hits": tuner.stats.persistent_hits,
                "benchmark_runs": tuner.stats.runs,
                "op_seconds": round(time.perf_counter() - t0, 4),
                "cache_state": tuner.cache.persistent.state if tuner.cache.persistent else "disabled",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
