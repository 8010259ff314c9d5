"""What a review of the reference engine found: a request whose keys and values were not finite
changing other requests' tokens (masked positions were weighted 0, and 0 x NaN is NaN), NumPy
token ids and request ids that passed the checks and then failed the run part way, and float8
dtypes accepted by Engine and refused by the first forward."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from engine_reference import generate as reference  # noqa: E402
from lifecore.engine import PRESETS, Engine, Request, Transformer  # noqa: E402
from lifecore.errors import InvalidArgumentError, LifecoreTypeError  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


def poisoned_model():
    model = Transformer(PRESETS["tiny"], dtype=torch.float64)
    with torch.no_grad():
        model.embed.weight[13] = float("nan")  # token 13's keys and values are NaN
    return model


def test_a_finished_requests_nan_keys_do_not_reach_the_next_request():
    model = poisoned_model()
    engine = Engine(model, num_blocks=2, max_batch=2)
    expected = reference(model, [1, 2, 3], 5)
    assert engine.generate([Request("b", [1, 2, 3], 5)]).tokens["b"] == expected
    engine.generate([Request("a", [13, 1, 2], 2)])  # its blocks keep NaN after it completes
    assert engine.generate([Request("b", [1, 2, 3], 5)]).tokens["b"] == expected  # read [0, 51, 38, ...]
    engine.close()


def test_a_running_requests_nan_keys_do_not_reach_the_one_beside_it():
    model = poisoned_model()
    engine = Engine(model, num_blocks=4, max_batch=2)
    result = engine.generate([Request("a", [13] + [1] * 20, 3), Request("b", [1, 2, 3], 5)])
    assert result.tokens["b"] == reference(model, [1, 2, 3], 5)  # read [0, 0, 0, 0, 0]
    engine.close()


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.uint64, np.int64])
def test_numpy_token_ids_of_any_integer_type_are_token_ids(dtype):
    # A prompt of NumPy uint8 ids passed the checks, then made a tensor the embedding refused,
    # after the other requests had run (np.uint64: "an integer is required").
    model = Transformer(PRESETS["tiny"], dtype=torch.float64)
    engine = Engine(model, num_blocks=8, max_batch=1)
    good = Request("good", [1, 2, 3], 3)
    ids = Request("ids", list(np.array([4, 5], dtype=dtype)), np.int64(3))
    result = engine.generate([good, ids])
    assert result.tokens["ids"] == reference(model, [4, 5], 3)
    assert result.tokens["good"] == reference(model, [1, 2, 3], 3)
    engine.close()


def test_requests_refused_before_any_runs():
    engine = Engine("tiny", num_blocks=8, max_batch=1)
    for bad, error, match in ((Request("bad\udcff", [4, 5], 3), InvalidArgumentError, "UTF-8"),
                              (Request("flag", [np.True_, 5], 3), LifecoreTypeError, "not a token id"),
                              (Request("count", [4, 5], np.True_), LifecoreTypeError, "max_new_tokens")):
        good = Request("good", [1, 2, 3], 3)
        with pytest.raises(error, match=match):
            engine.generate([good, bad])
        assert good.generated == []  # refused before any request ran
    engine.close()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_a_float8_engine_is_refused_when_made(name):
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"this torch has no {name}")
    with pytest.raises(InvalidArgumentError, match="torch computes in"):
        Engine("tiny", num_blocks=8, dtype=dtype)
    with pytest.raises(InvalidArgumentError, match="torch computes in"):
        Transformer(PRESETS["tiny"], dtype=dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64, np.int8])
def test_a_numpy_max_new_tokens_of_any_integer_type_is_that_count(dtype):
    # Checked as an int and then used as given: an unsigned one wrapped in the engine's sums
    # ("needs 17293822569102704641 blocks"), np.int8 overflowed with a long prompt.
    model = Transformer(PRESETS["tiny"], dtype=torch.float64)
    engine = Engine(model, num_blocks=16, max_batch=1)
    prompt = [1] * 100
    request = Request("r", prompt, dtype(3))
    result = engine.generate([request])
    assert result.rejected == {} and result.tokens["r"] == reference(model, prompt, 3)
    assert request.max_new_tokens == 3 and type(request.max_new_tokens) is int
    engine.close()
