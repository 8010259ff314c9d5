"""The differential runner: the same seeded steps on two devices, compared step by step."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import lifecore
from lifecore import cli
from lifecore.testing.differential import DeviceSpec, parse_specs, run_differential

from backend_roles import EMULATED

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "differential.py"


def test_the_emulated_device_against_itself_is_identical_and_covers_the_refusals() -> None:
    report = run_differential(parse_specs(f"{EMULATED},{EMULATED}"), steps=250, seed=3, runs=3)
    assert report.identical, report.summary()
    assert report.steps == 750 and report.seeds == [3, 4, 5]
    assert report.reads_compared > 0 and report.graphs_sealed > 0 and report.replays > 0
    causes = " ".join(report.refusals)
    # A host wait on the recording stream (a read or sync) is refused up front (CaptureStateError),
    # never left to the driver to refuse and invalidate the capture (900, then 901 at the end).
    for invalidation in ("(status 900)", "(status 901)", "CaptureRefusedError (invalidated)"):
        assert not any(invalidation in r for r in report.refusals), report.summary()
    for expected in ("CaptureStateError", "CaptureRefusedError"):
        assert expected in causes, report.summary()


def test_the_same_seed_gives_the_same_steps() -> None:
    one = run_differential(parse_specs(f"{EMULATED},{EMULATED}"), steps=120, seed=11)
    two = run_differential(parse_specs(f"{EMULATED},{EMULATED}"), steps=120, seed=11)
    assert one.ops == two.ops and one.refusals == two.refusals


@dataclass(frozen=True)
class _FaultySpec(DeviceSpec):
    """An emulated device whose kernel launches start failing after a few: a real behavioural difference."""

    def open(self):  # type: ignore[override]
        device = super().open()
        device.inject_fault("launch_kernel", 999, after=3, times=1000)
        return device


def test_a_divergence_stops_the_run_and_lists_the_steps() -> None:
    report = run_differential((DeviceSpec(EMULATED, "hardware"), _FaultySpec(EMULATED, "hardware")), steps=400, seed=0)
    assert not report.identical
    divergence = report.divergence
    assert divergence.outcomes[0] != divergence.outcomes[1]
    assert divergence.steps[-1][0] is divergence.step and report.steps == divergence.step.index + 1
    text = report.summary()
    assert "divergence at step" in text and f"#{divergence.step.index} " in text and "#0 " in text


def test_devices_that_capture_differently_are_refused() -> None:
    with pytest.raises(ValueError, match="capture differently"):
        run_differential(parse_specs(f"{EMULATED}/hardware,{EMULATED}/software"), steps=5)


NAMES = lifecore.backend_names()


@pytest.mark.parametrize("text", [NAMES[0], ",".join([NAMES[0]] * 3), f"{NAMES[0]},gpu",
                                  f"{NAMES[0]},{NAMES[0]}/sideways"])
def test_bad_specs(text: str) -> None:
    with pytest.raises(ValueError):
        parse_specs(text)


def test_an_unknown_backend_names_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=", ".join(["auto", *NAMES])):
        parse_specs("auto,gpu")


def test_specs_accept_every_backend() -> None:
    for name in NAMES:
        assert [str(s) for s in parse_specs(f"{name},{name}/software")] == [f"{name}/auto", f"{name}/software"]


def test_the_report_names_what_auto_opened() -> None:
    report = run_differential(parse_specs("auto,auto"), steps=5)
    with lifecore.Device("auto") as device:
        opened = f"{device.backend}/{device.graphs}"
    assert [str(s) for s in report.specs] == [opened, opened]
    assert report.summary().startswith(f"differential {opened} vs {opened}:")


def test_cli_differential(capsys) -> None:
    pair = f"{EMULATED},{EMULATED}"
    assert cli.main(["fuzz", "--differential", pair, "--examples", "2", "--steps", "60", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{EMULATED}/hardware vs {EMULATED}/hardware: 2 run(s)" in out and "identical" in out
    assert cli.main(["fuzz", "--differential", EMULATED]) == 2


def test_script_differential_and_an_unavailable_backend() -> None:
    pair = f"{EMULATED},{EMULATED}"
    ok = subprocess.run([sys.executable, str(SCRIPT), "--backends", pair, "--runs", "1", "--steps", "50"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "identical" in ok.stdout
    missing = [b.name for b in lifecore.backends() if not b.available]
    if not missing:
        pytest.skip("every backend is available here")
    bad = subprocess.run([sys.executable, str(SCRIPT), "--backends", f"{EMULATED},{missing[0]}", "--runs", "1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "differential:" in bad.stderr


class _WrappedDevice:
    """A device whose streams come wrapped in `wrap` (a stream type taking the real stream)."""

    def __init__(self, device, wrap):
        self._device, self._wrap = device, wrap

    def __getattr__(self, name):
        return getattr(self._device, name)

    def stream(self):
        return self._wrap(self._device.stream())


@dataclass(frozen=True)
class _WrappedSpec(DeviceSpec):
    wrap: type = object

    def open(self):  # type: ignore[override]
        return _WrappedDevice(super().open(), self.wrap)


class _LeftoverStream:
    """A stream whose new buffers hold an earlier buffer's values, as a GPU's reused memory does
    (the emulated device's come back zeroed): the runner must not compare what nothing wrote."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def alloc(self, size):
        buf = self._stream.alloc(size)
        if self._stream.capture_state.variant.name != "CAPTURE":  # a recorded fill would never run
            self._stream.fill(buf, lifecore.float_bits(-2.0))
        return buf


def test_memory_nothing_wrote_is_not_compared() -> None:
    # Seed 0's first run reads a buffer allocated after a refused capture and never written (the
    # divergence a GPU showed: -2.0 left over there, zeros on the emulated device).
    report = run_differential((DeviceSpec(EMULATED, "hardware"), _WrappedSpec(EMULATED, "hardware", _LeftoverStream)),
                              steps=250, seed=0, runs=3)
    assert report.identical, report.summary()
    assert report.reads_compared > 0 and report.replays > 0  # reads of defined memory, compared


class _OffByOneFillStream(_LeftoverStream):
    """Fills one bit off: memory a fill defined differs, which a read must show."""

    def fill(self, buf, value):
        return self._stream.fill(buf, value ^ 1)


def test_memory_a_fill_defined_is_compared() -> None:
    report = run_differential((DeviceSpec(EMULATED, "hardware"), _WrappedSpec(EMULATED, "hardware", _OffByOneFillStream)),
                              steps=250, seed=0, runs=3)
    assert not report.identical
    assert report.divergence.step.op == "read", report.summary()
