"""Engines sharing one Transformer. A capturing Engine's hooks stay on the model for the
engine's life; they observed every forward through it, so another Engine's generate on the
same model (capturing or not) failed with "no capture step is open". Each capturing engine
now observes, and intervenes in, its own steps only: on the thread running them, and never
between them."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lifecore.engine import PRESETS, CaptureOptions, Engine, Request, Transformer  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


def requests():
    return [Request("r0", [1, 2, 3], max_new_tokens=4), Request("r1", [5, 6], max_new_tokens=3)]


def records_of(engine):
    """Phase, point and summary of each record (a decode step's number runs on across an
    engine's generates)."""
    return [(phase, selection, payload.summary if payload is not None else None)
            for phase, _, selection, payload in engine.capture.records]


def solo(options):
    """What an engine with these options generates and records on a model of its own."""
    engine = Engine(Transformer(PRESETS["tiny"]), capture=options)
    try:
        return engine.generate(requests()).tokens, records_of(engine)
    finally:
        engine.close()


def test_engines_on_one_model_each_capture_their_own_steps():
    model = Transformer(PRESETS["tiny"])
    watching = Engine(model, capture=CaptureOptions())
    scaling = Engine(model, capture=CaptureOptions(scale=(0, 0.0)))  # changes the tokens it generates
    plain = Engine(model)
    try:
        watched_tokens, watched_records = solo(CaptureOptions())
        scaled_tokens, scaled_records = solo(CaptureOptions(scale=(0, 0.0)))
        assert scaled_tokens != watched_tokens  # the intervention shows in the tokens
        assert plain.generate(requests()).tokens == watched_tokens  # the engines' hooks pass it by
        assert watching.generate(requests()).tokens == watched_tokens
        assert scaling.generate(requests()).tokens == scaled_tokens  # its scale applies to its steps alone
        assert watching.generate(requests()).tokens == watched_tokens
        assert plain.generate(requests()).tokens == watched_tokens
        assert records_of(watching) == watched_records * 2
        assert records_of(scaling) == scaled_records
    finally:
        for engine in (watching, scaling, plain):
            engine.close()


def test_engines_on_one_model_on_two_threads():
    model = Transformer(PRESETS["tiny"])
    engines = [Engine(model, capture=CaptureOptions()), Engine(model, capture=CaptureOptions(scale=(0, 0.0)))]
    expected = [solo(CaptureOptions()), solo(CaptureOptions(scale=(0, 0.0)))]
    results: list[list] = [[], []]
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def run(k):
        try:
            start.wait()
            for _ in range(5):
                results[k].append(engines[k].generate(requests()).tokens)
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failures.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not failures, failures
        for k in range(2):
            assert results[k] == [expected[k][0]] * 5
            assert records_of(engines[k]) == expected[k][1] * 5
    finally:
        for engine in engines:
            engine.close()
