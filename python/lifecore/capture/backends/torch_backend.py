"""The PyTorch backend (CPU and CUDA tensors). Reductions run where the tensor lives; only
what a transform keeps crosses to the host, in one transfer. Also the routing helper a
mixture-of-experts selector uses to apply a session's routing control."""

from __future__ import annotations

import struct
from math import isfinite
from typing import Any

import numpy as np

try:
    import torch
except ModuleNotFoundError as error:
    from ..._needs_torch import torch_missing

    raise torch_missing("TorchBackend", error) from error

from ..._core.capture import (
    CapturePayload,
    CaptureUsage,
    GroupSelectionControl,
    InterventionAction,
    RoutingPolicy,
    TransformKind,
    TransformRequest,
)
from ...errors import InvalidArgumentError, LifecoreTypeError
from .arguments import require, require_intervention, require_transform
from .cost import TORCH_REDUCTION_BYTES, native_peak, payload_cost
from .leading import first_elements


class TorchBackend:
    """Tensors are ``torch.Tensor``s on any device. Tensor payloads (preview, slice, full
    tensor) are host torch tensors in the source dtype; reductions run where the tensor lives
    and copy only their results. Interventions return new tensors (the module's output is
    replaced by the hook, never modified in place).

    A summary of a float32 region is reduced in float32, at the speed of the hook it stands
    for (half precision is reduced in float32 too, float64 in float64): its mean and std carry
    float32's rounding, about 1e-7 relative for activations, more for values far from zero
    beside their spread (1e8 plus small offsets), where ``NumpyBackend``, which reduces in
    float64, is exact to float64."""

    def __init__(self) -> None:
        # One dict lookup per capture instead of a chain of enum comparisons.
        self._transforms = {
            TransformKind.SUMMARY: _summary,
            TransformKind.PREVIEW: _preview,
            TransformKind.SLICE: _values,
            TransformKind.FULL_TENSOR: _values,
            TransformKind.HISTOGRAM: _histogram,
            TransformKind.TOP_CANDIDATES: _top_candidates,
        }

    def describe(self, tensor: torch.Tensor) -> tuple[tuple[int, ...], int, bool]:
        """(shape, itemsize, on_host): the facts the session prices a capture from."""
        if type(tensor) is not _TENSOR:
            require(tensor, torch.Tensor, "TorchBackend.describe", "tensor")
        return tensor.shape, tensor.itemsize, tensor.is_cpu  # properties: no method call per point

    def shape(self, tensor: torch.Tensor) -> tuple[int, ...]:
        """The tensor's shape as a tuple. Raises LifecoreTypeError for anything but a ``torch.Tensor``."""
        require(tensor, torch.Tensor, "TorchBackend.shape", "tensor")
        return tuple(tensor.shape)

    def dtype(self, tensor: torch.Tensor) -> str:
        """The tensor's dtype class: "floating", "boolean", "integer" (every other real dtype)
        or "unknown" (complex)."""
        require(tensor, torch.Tensor, "TorchBackend.dtype", "tensor")
        if tensor.dtype.is_floating_point:
            return "floating"
        if tensor.dtype == torch.bool:
            return "boolean"
        if not tensor.dtype.is_complex:
            return "integer"
        return "unknown"

    def estimate(self, tensor: torch.Tensor, request: TransformRequest) -> CaptureUsage:
        """What the transform of ``request`` would charge (:func:`payload_cost` at the tensor's
        element size; the region counts as host bytes only for a tensor on the CPU, since on a
        device a reduction copies only its results); computes nothing."""
        require_transform(tensor, torch.Tensor, request, "TorchBackend.estimate")
        # A reduction on the device copies only its results; a value transform copies the region.
        return payload_cost(request.kind, request.selected_shape, tensor.element_size(),
                            max_elements=request.max_elements, edges=request.edges, count=request.count,
                            host_copy=tensor.is_cpu)

    def native_bytes(self, tensor: torch.Tensor, request: TransformRequest) -> int:
        """Peak native bytes the transform holds at once (:func:`native_peak`), on the host or
        the tensor's device: a tensor payload's copy, or a reduction's working copies and
        temporaries."""
        require_transform(tensor, torch.Tensor, request, "TorchBackend.native_bytes")
        return native_peak(request.kind, request.selected_shape, tensor.element_size(), TORCH_REDUCTION_BYTES,
                           request.max_elements)

    def transform(self, tensor: torch.Tensor, request: TransformRequest) -> CapturePayload:
        """The payload of ``request`` over its selected region (the whole tensor when
        ``request.whole``), detached from autograd: a preview (the first ``max_elements`` of the
        flattened region), a slice or full tensor (a contiguous host copy in the source dtype
        and shape), a summary (computed where the tensor lives; half precision in float32;
        integers and bool reduced as integers: min and max read in integers, mean and std in
        float64 of their differences from an integer near the mean), a histogram (counts per bin of ``edges``, the last bin
        closed; values outside are not counted), or top candidates (the ``count`` best of the
        last row's last axis, ties in index order, a NaN below every number, integers ranked
        as integers: as NumPy's backend ranks them; scores in float64). The session calls it only after reserving the cost. Raises
        LifecoreTypeError for a wrong argument type."""
        if type(tensor) is not torch.Tensor or type(request) is not TransformRequest:
            require_transform(tensor, torch.Tensor, request, "TorchBackend.transform")
        if tensor.requires_grad:
            tensor = tensor.detach()  # no autograd history for what is only observed
        region = tensor if request.whole else tensor[request.index]
        kind = request.kind
        if kind is not _SUMMARY:
            return self._transforms[kind](region, request)
        summary = _short_summary(region)
        if type(summary) is list:
            return _summary_payload(region.numel(), 0, *summary)
        return summary  # type: ignore[return-value]

    def summary_statistics(self, tensor: torch.Tensor, request: TransformRequest) -> list[float] | CapturePayload:
        """A SUMMARY request's result as the session asks for it on the per-point path: the
        short form ``[min, max, mean, population std]`` when the region's values and these four
        are all finite (the session adds the count), else the summary payload ``transform`` gives.
        Raises ValueError for another transform kind, LifecoreTypeError for a wrong argument
        type."""
        if type(tensor) is not torch.Tensor or type(request) is not TransformRequest:
            require_transform(tensor, torch.Tensor, request, "TorchBackend.summary_statistics")
        if request.kind is not _SUMMARY:
            raise ValueError(f"summary_statistics answers a SUMMARY request, not {request.kind}")
        if tensor.requires_grad:
            tensor = tensor.detach()  # no autograd history for what is only observed
        return _short_summary(tensor if request.whole else tensor[request.index])

    def intervene(self, tensor: torch.Tensor, request: Any) -> torch.Tensor:
        """A new tensor on the same device and dtype: a clone of ``tensor`` with the request's
        action applied to its region (zero, scale by ``factor``, mask by the payload, replace by
        it, add it, or set the logits of ``ids`` to -inf); the input is never modified. A REPLACE
        or ADD payload or a SCALE factor that is not finite in the tensor's dtype (1e6 in
        float16) raises ValueError (the operation fails) rather than writing inf. Under
        autograd (grad mode on, ``tensor`` requiring grad) the result keeps ``tensor``'s history:
        gradients flow through what the action kept, scaled or added to, and none through what
        it replaced, zeroed or masked, as with the same edit written in a forward hook. Raises
        ValueError for a routing action (those go through :func:`route`)."""
        require_intervention(tensor, torch.Tensor, request, "TorchBackend.intervene")
        # Out of place on a clone, recorded by autograd when it is on: detaching here would cut
        # the graph at the intervened module, and the parameters before it would get no gradient
        # (or a silently partial one, through a residual path around it).
        with torch.set_grad_enabled(torch.is_grad_enabled() and tensor.requires_grad):
            out = tensor.clone()
            index = request.index
            action = request.action
            if action == InterventionAction.ZERO:
                out[index] = 0
            elif action == InterventionAction.SCALE:
                # Checked in the target's dtype, as a payload is: 1e39 is inf in float32.
                factor = _rounded_once([request.factor], out.dtype)
                if not bool(torch.isfinite(factor).all()):
                    raise ValueError(f"scale factor of '{request.operation_id}' is not finite in {out.dtype} "
                                     f"(a value past the target dtype's range)")
                out[index] = out[index] * request.factor
            elif action in (InterventionAction.MASK, InterventionAction.REPLACE, InterventionAction.ADD):
                # Built on the host in the target's dtype and checked there (no device sync):
                # admission saw a finite payload, but 1e6 is inf in float16.
                payload = (torch.tensor(request.payload, dtype=out.dtype) if action == InterventionAction.MASK
                           else _rounded_once(request.payload, out.dtype)).reshape(request.payload_shape)
                if action != InterventionAction.MASK and not bool(torch.isfinite(payload).all()):
                    raise ValueError(f"payload of '{request.operation_id}' is not finite in {out.dtype} "
                                     f"(a value past the target dtype's range)")
                payload = payload.to(out.device)
                if action == InterventionAction.MASK:
                    out[index] = torch.where(payload.bool(), out[index], torch.zeros_like(out[index]))
                elif action == InterventionAction.REPLACE:
                    out[index] = payload
                else:
                    out[index] = out[index] + payload
            elif action == InterventionAction.MASK_LOGITS:
                region = out[index]
                region[..., list(request.ids)] = float("-inf")
                out[index] = region
            else:
                raise ValueError(f"{action} is not an activation intervention")
        return out

    def replacement_mismatch(self, original: torch.Tensor, replacement: torch.Tensor) -> str | None:
        """What keeps ``replacement`` (an intervention's result) from standing for ``original``:
        another dtype (float16 against bfloat16 too) or another device (one GPU against
        another too), as a phrase; None when it may. The session fails the operation on it
        and keeps the original output."""
        require(original, torch.Tensor, "TorchBackend.replacement_mismatch", "original")
        require(replacement, torch.Tensor, "TorchBackend.replacement_mismatch", "replacement")
        if replacement.dtype != original.dtype:
            return f"dtype {original.dtype} became {replacement.dtype}"
        if replacement.device != original.device:
            return f"device {original.device} became {replacement.device}"
        return None


_SUMMARY = TransformKind.SUMMARY
_TENSOR = torch.Tensor
_FLOAT32, _FLOAT64 = torch.float32, torch.float64
_INT64_MIN = -(2**63)
_summary_payload = CapturePayload.summary  # the constructor, looked up once


def _kept(values: torch.Tensor) -> CapturePayload:
    """A tensor payload owning a contiguous host copy of ``values`` in their dtype (a view
    would change when the model reuses its buffer). A copy made under ``torch.inference_mode``
    is made outside it, so it is a normal tensor: a probe trained on it can save it for backward."""
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            return _kept(values)
    if values.is_cpu:
        kept = values.clone(memory_format=torch.contiguous_format)
    else:
        kept = values.to("cpu").contiguous()
    return CapturePayload.from_array(kept)


def _preview(region: torch.Tensor, request: Any) -> CapturePayload:
    return _kept(first_elements(region, request.max_elements))  # not the whole region flattened


def _values(region: torch.Tensor, request: Any) -> CapturePayload:
    return _kept(region)


def _real(region: torch.Tensor, what: str) -> torch.Tensor:
    """``region``, refused when complex: a reduction in a real dtype would keep only the real
    part (a tensor payload refuses complex values too)."""
    if region.is_complex():
        raise InvalidArgumentError(f"TorchBackend: a {what} of complex values ({region.dtype}) would drop their "
                                   f"imaginary part; observe torch.view_as_real of them instead")
    return region


def _histogram(region: torch.Tensor, request: Any) -> CapturePayload:
    """Counts per bin of ``request.edges`` (the last bin closed; NaN and values outside the
    edges not counted). Only the counts' copy to the host waits for the device: the values
    outside are counted into a spare bin, not dropped by a boolean mask (whose size the host
    would have to read), and ``index_add_`` counts where ``bincount`` reads the largest bin."""
    with torch.no_grad():
        values = _real(region, "histogram").double().reshape(-1)
        bins = len(request.edges) - 1
        edges = torch.tensor(request.edges, dtype=torch.float64, device=values.device)
        inside = (values >= edges[0]) & (values <= edges[-1])  # False for NaN
        index = (torch.bucketize(values, edges, right=True) - 1).clamp(0, bins - 1)  # the last bin is closed
        index = index.masked_fill(~inside, bins)
        counts = torch.zeros(bins + 1, dtype=torch.int64, device=values.device)
        counts.index_add_(0, index, torch.ones_like(index))
        return CapturePayload.histogram(list(request.edges), counts[:bins].cpu().tolist())


def _rounded_once(values: Any, dtype: torch.dtype) -> torch.Tensor:
    """``values`` (floats, read as float64) in ``dtype`` on the host, each rounded once to the
    nearest. torch rounds a float64 to half precision through float32, twice: 1 + 2**-11 +
    2**-40 became 1.0, and 65519.999 became inf in float16 (NumPy's backend wrote 65504)."""
    if dtype is torch.float16:
        with np.errstate(over="ignore"):  # past float16's range: inf, which the caller refuses
            return torch.from_numpy(np.asarray(values, dtype=np.float64).astype(np.float16))
    if dtype is torch.bfloat16:
        # float64 to float32 rounded to odd (toward zero, then the last bit set if inexact):
        # with bits to spare below bfloat16's, the one rounding to bfloat16 is then correct.
        wide = np.asarray(values, dtype=np.float64)
        with np.errstate(over="ignore"):
            narrow = wide.astype(np.float32)
        narrow = np.where(np.abs(narrow.astype(np.float64)) > np.abs(wide), np.nextafter(narrow, np.float32(0)), narrow)
        odd = narrow.view(np.uint32) | (narrow.astype(np.float64) != wide).astype(np.uint32)
        return torch.from_numpy(odd.view(np.float32)).to(torch.bfloat16)
    return torch.tensor(values, dtype=dtype)


def _top_candidates(region: torch.Tensor, request: Any) -> CapturePayload:
    """The ``count`` highest scores of the last row, ranked as NumPy's backend ranks them (a
    stable sort): ties in index order, and a NaN below every number, -inf included. torch.topk
    gives ties in no set order and ranks NaN above every number, so it only finds the k-th
    score; the candidates are those above it and the first ties at it."""
    count = request.count
    with torch.no_grad():
        if not region.is_floating_point() and not region.is_complex():
            return _top_integers(region.reshape(-1, region.shape[-1])[-1], count)
        last = _real(region, "top candidates").double().reshape(-1, region.shape[-1])[-1]
        nan = last.isnan()
        key = last.masked_fill(nan, float("-inf"))
        kth = torch.topk(key, count).values[-1]
        if last.is_cpu:
            ids = _chosen_reading_sizes(last, nan, key, kth, count)
        else:
            ids = _chosen_on_device(nan, key, kth, count)
        ids = ids[torch.argsort(nan[ids].to(torch.int8), stable=True)]  # stable sorts keep index order
        ids = ids[torch.argsort(key[ids], descending=True, stable=True)]
        # One copy to the host: ids below 2**53 are exact in float64.
        host = torch.stack((ids.to(torch.float64), last[ids])).cpu()
        return CapturePayload.candidates(host[0].to(torch.int64).tolist(), host[1].tolist())


def _ordered_int64(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Integers (or bool) as int64 keys in the same order, and what a key adds back to be its
    value: a uint64 past 2**63 fits no int64, so its keys are its values less 2**63 (the top
    bit flipped), where float64 keys would merge neighbours past 2**53."""
    if values.dtype == torch.uint64:
        return values.view(torch.int64) ^ _INT64_MIN, 2**63
    return values.to(torch.int64), 0


def _top_integers(last: torch.Tensor, count: int) -> CapturePayload:
    """Top candidates of an integer (or bool) row ranked exactly, in integers: ties in index
    order (a stable sort, on the tensor's device); the scores are the values in float64."""
    key, _ = _ordered_int64(last)
    ids = torch.sort(key, descending=True, stable=True).indices[:count]
    host = torch.stack((ids.to(torch.float64), last[ids].to(torch.float64))).cpu()  # ids below 2**53: exact
    return CapturePayload.candidates(host[0].to(torch.int64).tolist(), host[1].tolist())


def _integer_summary(values: torch.Tensor) -> CapturePayload:
    """The summary of integers (or bools), all finite: min and max read in integers (each then
    rounded once to float64); the mean from the exact integer sum of the differences from an
    integer near it (each difference split in two 32-bit halves, whose sums fit int64 below
    2**31 values), rounded once; the std of those differences in float64 (float64 values past
    2**53 round neighbours together: std 0 for 2**60 + i). Two transfers to the host: the
    extremes and a rough mean, then the sums and the std, each as int64 words."""
    key, offset = _ordered_int64(values.reshape(-1))
    count = key.numel()
    if count == 0:
        nan = float("nan")
        return _summary_payload(0, 0, nan, nan, nan, nan)
    # The rough mean travels with the extremes as its bits, in one int64 transfer.
    low, high, rough_bits = torch.stack([key.min(), key.max(), key.double().mean().view(torch.int64)]).tolist()
    if high - low >= 2**63 or count >= 2**31:  # float64's rounding is far below a spread past 2**63
        wide = key.double()
        mean, std = torch.stack([wide.mean(), wide.std(unbiased=False)]).tolist()
        mean += offset
    else:
        centre = min(max(round(_float_of_bits(rough_bits)), low), high)
        deviations = key - centre  # each within the spread of the centre: no wrap
        high_sum, low_sum, std_bits = torch.stack([
            (deviations >> 32).sum(), (deviations & 0xFFFFFFFF).sum(),
            deviations.double().std(unbiased=False).view(torch.int64)]).tolist()
        total = high_sum * 2**32 + low_sum
        mean, std = ((centre + offset) * count + total) / count, _float_of_bits(std_bits)
    return _summary_payload(count, 0, float(low + offset), float(high + offset), mean, std)


def _float_of_bits(bits: int) -> float:
    """The float64 whose bits an int64 transfer carried."""
    (value,) = struct.unpack("<d", struct.pack("<q", bits))
    return float(value)


def _chosen_reading_sizes(last: torch.Tensor, nan: torch.Tensor, key: torch.Tensor, kth: torch.Tensor,
                          count: int) -> torch.Tensor:
    """The ids of the top ``count`` in index order, reading the k-th score and the sizes of
    masks on the host: the fastest way on the CPU, where reading them waits for nothing."""
    high = float(kth)
    above = (key > high).nonzero().flatten()  # fewer than count, in index order
    if high == float("-inf"):  # the -infs first, then the NaNs
        ties = torch.cat(((last == high).nonzero().flatten(), nan.nonzero().flatten()))
    else:
        ties = (key == high).nonzero().flatten()
    return torch.cat((above, ties[: count - above.numel()])).sort().values


def _chosen_on_device(nan: torch.Tensor, key: torch.Tensor, kth: torch.Tensor, count: int) -> torch.Tensor:
    """The same ids without the host reading anything (a read would wait for the device to
    finish all the model's queued work): ranks and masks stay on the device, and each chosen
    id is scattered to its place among them."""
    above = key > kth  # fewer than count
    # The ties at the k-th score in index order, a NaN after every real one (a NaN ties only
    # when the k-th score is -inf); the first ``count - above`` of them are chosen.
    tie = (key == kth) & ~nan
    tie_nan = nan & (kth == float("-inf"))
    wanted = count - above.sum()
    chosen = above | (tie & (tie.cumsum(0) <= wanted)) | (tie_nan & (tie.sum() + tie_nan.cumsum(0) <= wanted))
    # Exactly count are chosen: each goes to its place among them, the rest to a spare slot.
    slot = (chosen.cumsum(0) - 1).masked_fill(~chosen, count)
    ids = torch.empty(count + 1, dtype=torch.int64, device=key.device)
    return ids.scatter_(0, slot, torch.arange(key.numel(), device=key.device))[:count]


def _summary(region: torch.Tensor, request: Any) -> CapturePayload:
    return summarize(region)


def _short_summary(region: torch.Tensor) -> list[float] | CapturePayload:
    """The hot case: ``[min, max, mean, std]`` of a float32 / float64 region when the values
    and the four statistics are all finite (one pass, one transfer); otherwise the summary
    payload (a std that overflowed, non-finite values, another dtype, an empty region)."""
    if region.dtype is _FLOAT32 or region.dtype is _FLOAT64:
        try:
            statistics: list[float] = torch.stack(
                [region.min(), region.max(), region.mean(), region.std(unbiased=False)]).tolist()
        except RuntimeError:
            if region.numel():
                raise
            return summarize(region)  # an empty region has no min
        if isfinite(statistics[2]) and isfinite(statistics[3]):
            return statistics  # a finite mean means every value is finite (so are min and max)
    return summarize(region)  # non-finite values, or a sum or std past the dtype's range


def summarize(region: torch.Tensor) -> CapturePayload:
    """Count, non-finite count, min, max, mean and population std of the finite values,
    computed where the tensor lives and copied to the host in one transfer."""
    values = _real(region, "summary")
    dtype = values.dtype
    if not values.is_floating_point():
        return _integer_summary(values)  # integers and bools: exact min and max, as NumPy's backend
    if dtype is not _FLOAT32 and dtype is not _FLOAT64:
        values = values.float()  # half precision accumulates poorly, and float32 holds it exactly
    count = values.numel()
    if count == 0:
        nan = float("nan")
        return _summary_payload(0, 0, nan, nan, nan, nan)
    low, high, mean, std = torch.stack([values.min(), values.max(), values.mean(), values.std(unbiased=False)]).tolist()
    if isfinite(mean) and isfinite(std):  # a finite mean means every value is finite: one pass, one transfer
        return _summary_payload(count, 0, low, high, mean, std)
    values = values.reshape(-1)
    kept = values[torch.isfinite(values)].double()
    nonfinite = int(values.numel() - kept.numel())
    if kept.numel() == 0:
        nan = float("nan")
        return CapturePayload.summary(values.numel(), nonfinite, nan, nan, nan, nan)
    low, high, mean, std = torch.stack([kept.min(), kept.max(), kept.mean(), kept.std(unbiased=False)]).cpu().tolist()
    if not (isfinite(mean) and isfinite(std)):
        # Finite values whose sum or squares overflow float64: the same statistics of the
        # values scaled into range, scaled back (the mean and std of finite values are finite).
        scale = max(abs(low), abs(high))
        scaled = kept / scale
        mean, std = (value * scale for value in torch.stack([scaled.mean(), scaled.std(unbiased=False)]).cpu().tolist())
    return CapturePayload.summary(values.numel(), nonfinite, low, high, mean, std)


def _check_route(scores: Any, top_k: Any, control: Any, policy: Any) -> None:
    require(scores, torch.Tensor, "route", "scores")
    if not scores.is_floating_point():
        raise LifecoreTypeError(f"route: argument 'scores' must be floating-point router logits, got {scores.dtype}")
    if scores.dim() != 2:
        raise InvalidArgumentError(f"route: argument 'scores' must be [rows, experts], got shape {tuple(scores.shape)}")
    if not isinstance(top_k, int) or isinstance(top_k, bool):
        raise LifecoreTypeError(f"route: argument 'top_k' must be an int, got {type(top_k).__name__}")
    experts = scores.shape[1]
    if not 1 <= top_k <= experts:
        raise InvalidArgumentError(f"route: argument 'top_k' must be between 1 and the {experts} experts, got {top_k}")
    if control is not None:
        require(control, GroupSelectionControl, "route", "control")
        policy = control.policy
    elif policy is not None:
        require(policy, RoutingPolicy, "route", "policy")
    if policy is not None and policy.groups > 1 and experts % policy.groups != 0:
        raise InvalidArgumentError(f"route: the policy's {policy.groups} groups do not divide the {experts} experts")


def route(scores: torch.Tensor, top_k: int, control: GroupSelectionControl | None = None,
          policy: RoutingPolicy | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped top-k routing of router logits ``scores`` [rows, experts] -> (ids [rows,
    top_k], coefficients [rows, top_k]), applying a session's control to the selected rows
    when given (its policy then applies). Without a policy this is plain top-k with softmax
    coefficients over the chosen logits.

    Under a policy: scores are the logits ('softmax') or their sigmoid ('sigmoid'); a
    control's exclusion and biases change the scores used for selection; with groups, each
    group scores as its best expert and only the best ``topk_groups`` groups stay eligible;
    forced experts replace the choice in the control's rows whatever their groups score.
    Coefficients are the softmax of the chosen scores ('softmax'), or the chosen sigmoid
    scores (unbiased) divided by their sum plus ``epsilon`` ('sigmoid'); then times
    ``scale``. Learned per-expert coefficient scales belong to the module, applied after.

    The choice of experts carries no gradient; under autograd (grad mode on, ``scores``
    requiring grad) the coefficients do, to ``scores``, as the same formula written in torch
    would (so a router trained or attributed through this selector gets its gradient).

    LifecoreTypeError for ``scores`` that are not a floating torch tensor, a ``top_k`` that is
    not an int, or a ``control`` / ``policy`` of another type; InvalidArgumentError for scores
    that are not [rows, experts], a ``top_k`` outside 1..experts, or experts that the policy's
    groups do not divide."""
    _check_route(scores, top_k, control, policy)
    if control is not None:
        policy = control.policy
    with torch.no_grad():
        logits = scores.detach().float().clone()
        sigmoid = policy is not None and policy.scoring == "sigmoid"
        affinity = torch.sigmoid(logits) if sigmoid else logits
        selection = affinity.clone()
        rows = torch.arange(logits.shape[0], device=logits.device)
        if control is not None:
            window = rows[control.row_start:control.row_end:control.row_stride]
            experts = torch.tensor(list(control.expert_ids), dtype=torch.long, device=logits.device)
            action = control.action
            if action == InterventionAction.EXCLUDE_EXPERTS:
                selection[window.unsqueeze(1), experts.unsqueeze(0)] = float("-inf")
            elif action == InterventionAction.BIAS_ROUTING_SCORES:
                biases = torch.tensor(list(control.biases), dtype=selection.dtype, device=logits.device)
                before = selection[window.unsqueeze(1), experts.unsqueeze(0)]
                biased = before + biases
                # A score and its bias that sum past float32's range are an infinite score, and
                # the coefficients a NaN: refused (the hook records the routing FAILED).
                if bool((torch.isinf(biased) & torch.isfinite(before)).any()):
                    raise InvalidArgumentError("route: a routing bias added to its score passes float32's range "
                                               "(an infinite score, NaN coefficients); nothing was routed")
                selection[window.unsqueeze(1), experts.unsqueeze(0)] = biased
        # Forcing overrides the group choice: a forced expert's score is read from before the
        # groups outside the best are masked to -inf (a softmax over -inf is NaN).
        eligible = selection
        if policy is not None and policy.groups > 1:
            grouped = selection.reshape(selection.shape[0], policy.groups, -1)
            best_groups = torch.topk(grouped.max(dim=-1).values, policy.topk_groups, dim=-1).indices
            keep = torch.zeros(grouped.shape[:2], dtype=torch.bool, device=logits.device)
            keep.scatter_(1, best_groups, True)
            selection = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).reshape(selection.shape)
        top, ids = torch.topk(selection, top_k, dim=-1)
        if control is not None and control.action == InterventionAction.FORCE_EXPERTS:
            ids[window] = experts.reshape(-1, top_k)
            top = torch.gather(eligible, 1, ids)
        if sigmoid and policy is not None:  # sigmoid scoring comes from a policy
            chosen = torch.gather(affinity, 1, ids)
            coefficients = chosen / (chosen.sum(dim=-1, keepdim=True) + policy.epsilon)
        else:
            coefficients = torch.softmax(top, dim=-1)
        if policy is not None and policy.scale != 1.0:
            coefficients = coefficients * policy.scale
        if control is not None and control.action == InterventionAction.ZERO_EXPERT_CONTRIBUTION:
            zeroed = torch.isin(ids[window], experts)
            sub = coefficients[window]
            sub[zeroed] = 0
            coefficients[window] = sub
    if torch.is_grad_enabled() and scores.requires_grad:
        coefficients = _coefficients_with_grad(scores, ids, control, policy, sigmoid)
    return ids, coefficients


def _coefficients_with_grad(scores: torch.Tensor, ids: torch.Tensor, control: GroupSelectionControl | None,
                            policy: RoutingPolicy | None, sigmoid: bool) -> torch.Tensor:
    """:func:`route`'s coefficients at the chosen ``ids``, recomputed from ``scores`` with
    autograd recording: the scores a chosen expert was ranked by (affinity, plus a control's
    biases) gathered at ``ids``, then the same normalization, scale and zeroing."""
    logits = scores.float()
    affinity = torch.sigmoid(logits) if sigmoid else logits
    rows = torch.arange(logits.shape[0], device=logits.device)
    window: torch.Tensor | None = None
    experts: torch.Tensor | None = None
    if control is not None:
        window = rows[control.row_start:control.row_end:control.row_stride]
        experts = torch.tensor(list(control.expert_ids), dtype=torch.long, device=logits.device)
    if sigmoid and policy is not None:
        chosen = torch.gather(affinity, 1, ids)
        coefficients = chosen / (chosen.sum(dim=-1, keepdim=True) + policy.epsilon)
    else:
        selection = affinity
        if control is not None and control.action == InterventionAction.BIAS_ROUTING_SCORES:
            assert window is not None and experts is not None  # set with the control
            bias = torch.zeros_like(affinity)
            bias[window.unsqueeze(1), experts.unsqueeze(0)] = torch.tensor(
                list(control.biases), dtype=affinity.dtype, device=logits.device)
            selection = affinity + bias
        coefficients = torch.softmax(torch.gather(selection, 1, ids), dim=-1)
    if policy is not None and policy.scale != 1.0:
        coefficients = coefficients * policy.scale
    if control is not None and control.action == InterventionAction.ZERO_EXPERT_CONTRIBUTION:
        assert window is not None and experts is not None  # set with the control
        zeroed = torch.zeros_like(ids, dtype=torch.bool)
        zeroed[window] = torch.isin(ids[window], experts)
        coefficients = coefficients.masked_fill(zeroed, 0)
    return coefficients
