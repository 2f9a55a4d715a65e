"""A 256 MiB read through client.read_one against CuPy's get(), alternated (ms per read).

    python3 bench/probes/cuda_large_read.py [MiB] [staging_max_bytes]
"""
from __future__ import annotations

import sys
import time

import cupy as cp
import numpy as np

import cubeplug

n = (int(sys.argv[1]) if len(sys.argv) > 1 else 256) << 20
overrides = {"backends": {"cuda": {"staging_max_bytes": sys.argv[2]}}} if len(sys.argv) > 2 else {}
client = cubeplug.client("cuda", **overrides)
h = client.create(np.ones(n, np.uint8))
a = cp.ones(n, cp.uint8)
client.read_one(h)
a.get()
ours, theirs = [], []
for _ in range(7):
    t0 = time.perf_counter()
    client.read_one(h)
    ours.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    a.get()
    theirs.append(time.perf_counter() - t0)
print("read_one ms", [round(x * 1e3, 1) for x in ours])
print("get()    ms", [round(x * 1e3, 1) for x in theirs])
print("median ratio get/read", round(float(np.median(np.array(theirs) / np.array(ours))), 3))
