"""The benchmark harness, on injected clocks: what it times, in which order, and what it reports.

Correctness only: every cost here is a fake clock's tick, so every figure is exact."""

from __future__ import annotations

import json

import pytest

from lifecore.benchmarks.harness import Side, Summary, compare, format_run, interleave, measure


class FakeClock:
    """Nanoseconds that pass only when a fake side says it did some work."""

    def __init__(self) -> None:
        self.now = 0
        self.log: list[str] = []

    def __call__(self) -> int:
        return self.now

    def side(self, name: str, cost: int):
        def work() -> None:
            self.log.append(name)
            self.now += cost
        return work


def test_a_costing_twice_b_gives_exact_samples_and_a_ratio_of_two() -> None:
    clock = FakeClock()
    run = compare(clock.side("A", 2000), clock.side("B", 1000), rounds=5, warmup=2, inner=3, clock=clock)
    assert run["A"].samples_ns == (2000.0,) * 5 and run["B"].samples_ns == (1000.0,) * 5
    assert run.ratios[0].samples == (2.0,) * 5
    assert run.ratios[0].summary == Summary(2.0, 2.0, 2.0)
    assert run["A"].summary.median == 2000 and run["A"].inner == 3
    # Warmup rounds run too, interleaved batch by batch: AAA BBB AAA BBB ...
    assert clock.log == (["A"] * 3 + ["B"] * 3) * 7


def test_more_sides_interleave_in_the_order_given() -> None:
    clock = FakeClock()
    run = interleave({"x": clock.side("x", 5), "y": clock.side("y", 7), "z": clock.side("z", 1)},
                     rounds=2, warmup=0, inner=1, clock=clock)
    assert clock.log == ["x", "y", "z", "x", "y", "z"]
    assert list(run.measurements) == ["x", "y", "z"]


def test_a_ratio_is_taken_per_round() -> None:
    clock = FakeClock()
    costs = iter([100, 10, 300, 10, 200, 10])  # A, B alternately: ratios 10, 30, 20

    def step() -> None:
        clock.now += next(costs)

    run = compare(step, step, rounds=3, warmup=0, inner=1, clock=clock, names=("slow", "fast"))
    assert run.ratios[0].samples == (10.0, 30.0, 20.0)
    assert run.ratios[0].summary == Summary(20.0, 15.0, 25.0)


def test_quartiles_interpolate_linearly() -> None:
    assert Summary.of([1, 2, 3, 4, 5]) == Summary(3, 2, 4)
    assert Summary.of([4, 1, 3, 2]) == Summary(2.5, 1.75, 3.25)
    assert Summary.of([7.0]) == Summary(7.0, 7.0, 7.0)
    with pytest.raises(ValueError):
        Summary.of([])


def test_per_divides_by_the_units_of_work_and_rates_are_per_second() -> None:
    clock = FakeClock()
    run = measure(Side(clock.side("n", 4000), per=4, unit="node", rate=True), rounds=3, warmup=0, inner=2,
                  clock=clock)
    m = run["time"]
    assert m.samples_ns == (1000.0,) * 3 and m.unit == "node"
    assert m.rate_summary.median == pytest.approx(1e6)
    assert format_run(run).splitlines()[0] == "(3 rounds, median [q1 .. q3])"  # one side: nothing interleaved


def test_the_rate_is_the_median_of_each_rounds_rate() -> None:
    """It was the rate of the median time: with two rounds of 1 and 3 us, 500,000 per second
    (1 / 2 us) where the rounds ran at 1,000,000 and 333,333 (median 666,667)."""
    clock = FakeClock()
    times = iter([1000, 3000])
    def side() -> None:
        clock.now += next(times)

    run = measure(Side(side, rate=True), rounds=2, warmup=0, inner=1, clock=clock)
    assert run["time"].rate_summary.median == pytest.approx((1e6 + 1e9 / 3000) / 2)


def test_before_and_after_stay_outside_the_timed_span() -> None:
    clock = FakeClock()
    events: list[str] = []

    def before() -> None:
        events.append("before")
        clock.now += 10**6

    def after() -> None:
        events.append("after")
        clock.now += 10**6

    run = measure(Side(clock.side("w", 50), before=before, after=after), rounds=2, warmup=1, inner=4, clock=clock)
    assert run["time"].samples_ns == (50.0, 50.0)
    assert events == ["before", "after"] * 3


def test_inner_is_calibrated_until_a_batch_lasts_long_enough() -> None:
    clock = FakeClock()
    run = measure(clock.side("c", 1000), rounds=1, warmup=0, min_batch_s=1e-5, clock=clock)
    assert run["time"].inner == 16  # 1, 2, 4, 8 calls last under 10,000 ns; 16 do not
    assert run["time"].samples_ns == (1000.0,)
    # Per-side counts when given as a mapping.
    run = compare(clock.side("a", 1), clock.side("b", 1), inner={"A": 2, "B": 5}, rounds=1, warmup=0, clock=clock)
    assert (run["A"].inner, run["B"].inner) == (2, 5)


def test_a_difference_is_derived_round_by_round() -> None:
    clock = FakeClock()
    run = interleave({"with": clock.side("w", 900), "without": clock.side("o", 600), "backend": clock.side("b", 100)},
                     rounds=2, warmup=0, inner=1, clock=clock)
    derived = run.difference("observe", "with", "without", "backend")
    assert derived.samples_ns == (200.0, 200.0) and run["observe"] is derived
    assert run.ratio("without", "observe").samples == (3.0, 3.0)
    with pytest.raises(KeyError, match="no side named"):
        run.ratio("with", "nonesuch")


def test_a_difference_drowned_in_noise_is_printed_as_no_measurement() -> None:
    # Before: "-3.1 us per observe" and a ratio of "-24.2x", with nothing to say what they were.
    clock = FakeClock()
    run = interleave({"with": clock.side("w", 500), "without": clock.side("o", 600), "backend": clock.side("b", 100)},
                     rounds=3, warmup=0, inner=1, clock=clock)
    run.difference("observe", "with", "without", "backend")
    run.ratio("without", "observe")
    run.ratio("with", "without")
    lines = {line.split("  ")[1].strip(): line for line in format_run(run).splitlines()[1:]}
    assert "not positive: below this run's noise, no measurement" in lines["observe"]
    assert "no round had both times positive" in lines["without / observe"]
    assert "not positive" not in lines["with / without"] and "not positive" not in lines["with"]


def test_a_ratio_of_two_differences_below_the_noise_is_no_figure() -> None:
    # Before: two negative per-point differences printed a ratio of "2x [1.5 .. 2]", no note.
    clock = FakeClock()
    run = interleave({"a": clock.side("a", 500), "b": clock.side("b", 400), "base": clock.side("z", 600)},
                     rounds=3, warmup=0, inner=1, clock=clock)
    run.difference("a over base", "a", "base")  # -100 each round
    run.difference("b over base", "b", "base")  # -200 each round
    ratio = run.ratio("a over base", "b over base")
    assert ratio.undefined_rounds == 3 and not ratio.defined
    import json  # strict JSON: a round with no ratio, and a summary of none, are null
    data = json.loads(json.dumps(run.to_json(), allow_nan=False))["ratios"]["a over base / b over base"]
    assert data["median"] is None and data["samples"] == [None] * 3
    line = next(line for line in format_run(run).splitlines() if "a over base / b over base" in line)
    assert "no round had both times positive" in line and "x" not in line.split("/ b over base")[1].split("(")[0]


def test_a_ratio_leaves_out_the_rounds_without_one_and_names_a_noisy_operand() -> None:
    clock = FakeClock()
    costs = iter([700, 500, 900, 1000, 550])  # rounds of 'with' against a base of 600: two below it

    def varying() -> None:
        clock.now += next(costs)

    run = interleave({"with": varying, "base": clock.side("z", 600), "other": clock.side("o", 50)},
                     rounds=5, warmup=0, inner=1, clock=clock)
    run.difference("extra", "with", "base")  # 100, -100, 300, 400, -50
    ratio = run.ratio("extra", "other")
    assert ratio.undefined_rounds == 2 and ratio.summary.median == 6.0  # of 2, 6, 8
    assert run.to_json()["ratios"]["extra / other"]["undefined_rounds"] == 2
    line = next(line for line in format_run(run).splitlines() if "extra / other" in line)
    assert "2 of 5 rounds left out: a time not positive" in line
    assert "'extra' is within this run's noise" in line


def test_a_round_of_no_time_gives_no_ratio_instead_of_nan() -> None:
    # Before: a coarse clock's 0 ns round made 0/0 an infinity and the median NaN ("nanx").
    clock = FakeClock()
    run = interleave({"a": clock.side("a", 0), "b": clock.side("b", 0)}, rounds=3, warmup=0, inner=1, clock=clock)
    run.ratio("a", "b")
    assert "nan" not in format_run(run)


def test_a_difference_whose_spread_reaches_below_zero_says_it_is_within_the_noise() -> None:
    # Before: "24 us per observe [-11.7 us .. 53.4 us]" and a ratio of "13.6x [-23.7 .. 82.2]",
    # printed as figures like any other.
    clock = FakeClock()
    costs = iter([700, 900, 1000, 950, 660] * 2)  # one side's rounds: below the other's, then above

    def varying() -> None:
        clock.now += next(costs)

    run = interleave({"with": varying, "without": clock.side("o", 600), "backend": clock.side("b", 100)},
                     rounds=5, warmup=0, inner=1, clock=clock)
    derived = run.difference("observe", "with", "without", "backend")
    assert derived.summary.median > 0 and derived.summary.q1 <= 0
    run.ratio("with", "without")
    lines = {line.split("  ")[1].strip(): line for line in format_run(run).splitlines()[1:]}
    assert "spread reaches zero or below: within this run's noise" in lines["observe"]
    assert "not positive" not in lines["observe"]
    assert "within" not in lines["with / without"] and "within" not in lines["with"]


def test_the_formatter_prints_only_what_was_measured() -> None:
    clock = FakeClock()
    run = compare(clock.side("A", 2000), clock.side("B", 1000), rounds=3, warmup=0, inner=1, clock=clock,
                  names=("eager", "replay"), title="demo")
    run.facts["correct"] = True
    text = format_run(run)
    assert text.splitlines()[0] == "demo (3 rounds interleaved, median [q1 .. q3])"
    assert "eager" in text and "2 us per call  [2 us .. 2 us]" in text and "1 us per call" in text
    assert "eager / replay" in text and "2x  [2 .. 2]" in text and "correct: True" in text
    # JSON carries the same figures and every sample.
    data = json.loads(json.dumps(run.to_json()))
    assert data["sides"]["eager"]["median_ns"] == 2000 and data["sides"]["eager"]["samples_ns"] == [2000] * 3
    assert data["ratios"]["eager / replay"]["median"] == 2 and data["rounds"] == 3
    assert "interquartile" in data["spread"] and data["facts"] == {"correct": True}


@pytest.mark.parametrize("kwargs, message", [
    ({"rounds": 0}, "rounds"),
    ({"rounds": True}, "rounds"),
    ({"warmup": -1}, "warmup"),
    ({"inner": 0}, "inner"),
    ({"inner": {"A": 1}}, "no count for: B"),
    ({"inner": {"A": 1, "B": 1, "C": 1}}, "do not exist: C"),
    ({"min_batch_s": 0}, "min_batch_s"),
    ({"names": ("A", "A")}, "two different names"),
])
def test_bad_arguments_are_refused_before_anything_runs(kwargs, message) -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match=message):
        compare(clock.side("A", 1), clock.side("B", 1), clock=clock, **kwargs)
    assert clock.log == []


def test_a_side_needs_a_callable_and_whole_units() -> None:
    with pytest.raises(TypeError):
        Side(42)  # type: ignore[arg-type]
    for per in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            Side(lambda: None, per=per)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        interleave({}, clock=FakeClock())
