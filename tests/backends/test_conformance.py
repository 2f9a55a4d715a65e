"""The conformance suite itself: it catches broken backends, skips only by capability, and its tooling works.

Each scenario runs the suite in a child pytest against a "mutant": the CPU backend registered in
process under another name with one thing broken (or one capability removed), so the suite's
verdict can be checked from outside.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cubeplug
from cubeplug.commands.conformance import plugin_installed
from cubeplug.testing.backend import resolve_selector
from cubeplug.testing.gates import NO_DIALECT
from cubeplug.testing.plugin import read_xfails

ROOT = Path(cubeplug.__file__).resolve().parents[1]

MUTANT = """
import dataclasses
from cubeplug.backends.cpu.server import CpuServer
from cubeplug.backends.cpu.storage import CpuStorage
from cubeplug.core.backend import DeviceInfo
from cubeplug.core.handle import Handle
from cubeplug.plugin import BackendSpec, CompileError, Probe, hookimpl

MUTATION = {mutation!r}


class Mutant(CpuServer):
    def __init__(self, storage, config, device):
        super().__init__(storage, config, device)
        self.backend = "mutant"
        self.info = DeviceInfo("mutant", device, "mutant " + MUTATION)
        if MUTATION == "caps":
            self.capabilities = dataclasses.replace(
                self.capabilities, dtypes=frozenset({{"f32", "i32", "u32"}}), fp16=False, fp64=False,
                int64=False, atomics=False, dynamic_count=False, max_alloc_bytes=0,
            )
        if MUTATION == "nodialect":
            self.dialects = ("klingon",)

    def compile(self, kernel, dialect, mode):
        if MUTATION == "nocompile":  # as the pip PoCL on a processor its LLVM does not know
            raise CompileError("error: unknown target CPU 'generic'", backend="mutant", kernel=kernel.name)
        try:
            return super().compile(kernel, dialect, mode)
        except CompileError as e:  # the CPU compiler names its own backend
            e.backend = "mutant"
            raise

    def execute(self, stream_id, compiled, count, buffers, scalars):
        if MUTATION == "offsets":  # binds every buffer at the start of its allocation
            buffers = [Handle(h.memory(), h.client, h.nbytes, h.stream, 0, h.nbytes - h.size)
                       for h in buffers]
        if MUTATION == "scalars":  # passes the scalars in reverse order
            scalars = scalars[::-1]
        super().execute(stream_id, compiled, count, buffers, scalars)


@hookimpl
def cubeplug_backends():
    return [BackendSpec("mutant", "a broken CPU backend", ("python",), lambda: Probe(True), kind="cpu")]


@hookimpl
def cubeplug_compute_storage(backend, device, config):
    return CpuStorage()


@hookimpl
def cubeplug_compute_server(backend, device, config, storage, streams):
    return Mutant(storage, config, device)
"""

SUITE_MODULE = """
import cubeplug, mutant_plugin
cubeplug.register_backend(mutant_plugin)
from cubeplug.testing.suite import *  # noqa
CUBEPLUG_BACKEND = "mutant"
"""


def _env(path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("CUBEPLUG_BACKEND", None)
    return env


def run_mutant(tmp_path: Path, mutation: str, *args: str) -> tuple[int, str]:
    """Run the suite on a mutant in a child pytest; (exit status, output)."""
    (tmp_path / "mutant_plugin.py").write_text(MUTANT.format(mutation=mutation))
    (tmp_path / "test_mutant.py").write_text(SUITE_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    plugin = [] if plugin_installed() else ["-p", "cubeplug.testing.plugin"]
    cmd = [sys.executable, "-m", "pytest", "test_mutant.py", "-p", "no:cacheprovider", "-q", "-rfEs", *plugin]
    proc = subprocess.run(
        [*cmd, *args], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout + proc.stderr


def failed(output: str) -> set[str]:
    """The test names (``Class::test[param]``) reported as failed."""
    return set(re.findall(r"^FAILED \S+::(\S+::\S+)", output, re.M))


def test_ignored_offsets_are_caught(tmp_path: Path) -> None:
    code, out = run_mutant(tmp_path, "offsets", "-k", "TestViews or TestLaunch")
    assert code == 1, out
    assert {
        "TestViews::test_launch_on_view",
        "TestViews::test_two_views_of_one_allocation",
        "TestLaunch::test_vector_buffer_on_a_view",
    } <= failed(out), out


def test_reordered_scalars_are_caught(tmp_path: Path) -> None:
    code, out = run_mutant(tmp_path, "scalars", "-k", "TestLaunch")
    assert code == 1, out
    fails = failed(out)
    assert "TestLaunch::test_every_declared_dtype[f32]" in fails, out
    assert "TestLaunch::test_every_declared_dtype_interleaved_in_one_launch" in fails, out
    assert "TestLaunch::test_entry_point_and_defines" not in fails, out  # no scalars: unaffected


def test_a_backend_that_cannot_compile_fails_fast_with_the_compile_error(tmp_path: Path) -> None:
    # The cross-stream tests compile in a helper thread: its CompileError must fail the test at once,
    # not leave the test waiting out its timeout for an event the thread never sets.
    code, out = run_mutant(tmp_path, "nocompile", "-k", "TestStreams", "--timeout=60")
    assert code == 1, out
    assert {
        "TestStreams::test_cross_stream_read_waits_for_the_writer",
        "TestStreams::test_cross_stream_launch_waits_for_the_writer",
        "TestStreams::test_two_threads_on_their_own_streams",
    } <= failed(out), out
    parts = re.split(r"^_{3,} (\S+) _{3,}$", out, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    for test in ("read", "launch"):
        section = sections[f"TestStreams.test_cross_stream_{test}_waits_for_the_writer"]
        assert "CompileError" in section and "unknown target CPU 'generic'" in section, section
        assert "Timeout" not in section and "did not queue" not in section, section


def test_a_test_stuck_past_the_hard_limit_ends_the_run_with_every_stack(tmp_path: Path) -> None:
    (tmp_path / "test_stuck.py").write_text(
        "import time\n\ndef test_stuck():\n    time.sleep(60)\n\ndef test_never_reached():\n    pass\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\ncubeplug_timeout = 1\n")
    plugin = [] if plugin_installed() else ["-p", "cubeplug.testing.plugin"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "test_stuck.py", "-p", "no:cacheprovider", "-p", "no:timeout", "-q",
         *plugin],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_stuck.py::test_stuck still runs after 1 s" in proc.stderr, proc.stderr
    assert "in test_stuck" in proc.stderr  # the stack of the stuck test
    assert "test_never_reached" not in proc.stdout


def test_missing_capabilities_skip_with_their_names(tmp_path: Path) -> None:
    code, out = run_mutant(tmp_path, "caps")
    assert code == 0, out
    reasons = set(re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.M))
    assert reasons == {
        "backend lacks atomics",
        "backend lacks dynamic_count",
        "backend lacks max_alloc_bytes",
        "backend lacks device_timing",
        "backend lacks pitched_tensors",
        "backend lacks offset_alignment",
        *(f"backend lacks {d}" for d in ("f16", "f64", "i8", "i16", "i64", "u8", "u16", "u64", "bool")),
    }, out


def test_no_suite_dialect_skips_launches_only(tmp_path: Path) -> None:
    code, out = run_mutant(tmp_path, "nodialect")
    assert code == 0, out
    reasons = set(re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.M))
    assert NO_DIALECT in reasons and all(r == NO_DIALECT or r.startswith("backend lacks") for r in reasons), (
        out
    )
    passed = int(re.search(r"(\d+) passed", out).group(1))  # type: ignore[union-attr]
    assert passed > 50, out  # memory, data, bad input and to_client need no kernel


def test_xfail_list_marks_and_reports(tmp_path: Path) -> None:
    xfails = tmp_path / "xfails.txt"
    xfails.write_text(
        "# known failures of the mutant\n"
        "TestViews::test_launch_on_view  # offsets ignored\n"
        "TestViews::test_offsets_accumulate\n"
        "TestNothing::test_gone\n"
    )
    assert read_xfails(xfails) == [
        "TestViews::test_launch_on_view", "TestViews::test_offsets_accumulate", "TestNothing::test_gone",
    ]  # fmt: skip
    code, out = run_mutant(tmp_path, "offsets", "-k", "test_launch_on_view or test_offsets_accumulate",
                           f"--cubeplug-xfails={xfails}")  # fmt: skip
    assert code == 0, out
    assert "1 xfailed" in out and "1 xpassed" in out, out
    assert "XPASS 'TestViews::test_offsets_accumulate'" in out and "remove the entry" in out, out
    assert "UNUSED 'TestNothing::test_gone'" in out, out


def test_cli_summary_line(tmp_path: Path) -> None:
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("TestIdentity::test_identity\n")
    proc = subprocess.run(
        [sys.executable, "-m", "cubeplug", "conformance", "cpu", "-k", "TestIdentity or test_pitched_rows",
         "--xfails", str(xfails)],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "1 passed, 0 failed, 1 skipped, 1 xpassed" in lines, proc.stdout
    assert "  skipped 1: backend lacks pitched_tensors" in lines, proc.stdout


def test_cli_fails_on_an_unusable_backend(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cubeplug", "conformance", "no-such-backend"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "no-such-backend" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("option", "module", "env", "expected"),
    [
        (None, None, {}, "auto"),
        ("opencl:1", None, {}, "opencl:1"),
        (None, "cpu", {}, "cpu"),
        ("opencl:pocl:0", "cpu", {}, "cpu"),  # a module naming its backend keeps it
        ("opencl:pocl:0", "opencl", {}, "opencl:pocl:0"),  # the option picks its device
        (None, "opencl", {"CUBEPLUG_TEST_OPENCL": "opencl:nvidia:0"}, "opencl:nvidia:0"),
    ],
)
def test_selector_resolution(
    option: str | None, module: str | None, env: dict[str, str], expected: str
) -> None:
    assert resolve_selector(option, module, env) == expected
