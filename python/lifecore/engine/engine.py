"""The engine: a model, a coordinator, a KV cache, a scheduler, optional capture and graphs."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

import numpy as np
import torch

from .._copy_protocol import _refusal
from .._torch_hooks import finish_despite_interrupts
from ..errors import ClosedError, DriverError, EngineError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError
from ..sequence import AdmissionCoordinator, Admitted
from .capture import CaptureOptions, EngineCapture
from .graphs import DecodeGraphs
from .kv_cache import DOMAIN, KVCache, on_device, page_bytes
from .model import PRESETS, ModelConfig, StepInputs, Transformer, check_float_dtype, check_seed
from .scheduler import LifecoreMemory, Request, Running, Scheduler, Stats

__all__ = ["Engine", "Result"]

PAD_REQUEST = "lifecore-engine-padding"
# The most tokens a block holds: the coordinator counts a page's tokens in 32 bits.
_MAX_BLOCK_SIZE = 2**32 - 1
# The most blocks a domain holds: its block ids are int32.
_MAX_BLOCKS = 2**31

_T = TypeVar("_T")


@dataclass
class Result:
    """What one ``Engine.generate`` call produced: ``tokens`` maps each request id to its
    generated tokens, ``stats`` counts the scheduler's work (:class:`Stats`), ``seconds`` is the
    wall time, and ``graph_captures`` / ``graph_replays`` count the decode graphs captured and
    replayed (0 off CUDA). A rejected request has no tokens: ``rejected`` says why; a cancelled
    one has those it generated before it stopped (``cancelled`` lists it)."""

    tokens: dict[str, list[int]]
    stats: Stats
    seconds: float
    graph_captures: int
    graph_replays: int
    graph_pool: str = "none"
    """Whose pool held torch's memory in the graph windows: "lifecore" (lifecore's pooled
    allocator, so the windows' guarantees cover torch's work), "torch" (a private torch pool,
    where this torch cannot load a pluggable allocator), or "none" (no graphs)."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Request id -> why it was rejected (it can never fit the engine's blocks), for each request
    rejected; its ``tokens`` entry is empty."""
    cancelled: list[str] = field(default_factory=list)
    """The ids of the requests ``Request.cancel()`` stopped before they were done, in the order
    they stopped; their ``tokens`` entries hold what they generated until then."""


def _host_memory_bytes() -> int:
    """The host's physical memory (unbounded where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 2**64


def _device(device: Union[str, torch.device]) -> torch.device:
    """The engine's torch device: a CPU or a CUDA device (the KV cache lives on lifecore's memory)."""
    if not isinstance(device, (str, torch.device)):
        raise LifecoreTypeError(f"Engine: device must be a str or a torch.device, got {type(device).__name__}")
    try:
        wanted = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise InvalidArgumentError(f"Engine: device {device!r} is not a torch device ({error})") from None
    if wanted.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"Engine: device must be a CPU or a CUDA device, got {device!r}")
    return wanted


class Engine:
    """Serves greedy generation with continuous batching over a paged KV cache.

    ``num_blocks`` is the KV pool in blocks of ``block_size`` tokens; ``max_batch`` the
    coordinator's active-sequence slots (each a positive int). A ``Transformer`` given as
    ``model`` keeps its dtype and must be on ``device``. ``graphs``: capture the decode step per batch-size
    bucket (only on CUDA, and never while capturing activations: True with ``capture`` raises
    ``InvalidArgumentError``); None picks it on CUDA unless capturing.
    With ``capture``, the model's layers stay hooked until ``close()``, and the hooks observe
    (and intervene in) this engine's own steps alone, on the thread running them: another engine
    given the same ``Transformer``, capturing or not, and any forward of it between this engine's
    steps, pass them by.

    Every argument is checked before anything is made: a wrong type raises
    ``LifecoreTypeError``, a wrong value ``InvalidArgumentError`` (a ``device`` other than a CPU
    or a CUDA one, a dtype that is not floating point, a ``capture`` whose budget, scaled layer or
    scale factor does not fit the model: a factor past what the model's dtype holds), each naming
    the argument; a ``block_size`` past 2**32 - 1 tokens,
    ``num_blocks`` past 2**31 - 1 (a domain's block ids are int32) or a pool past 2**63 bytes
    ``LifecoreOverflowError``. Only whether the device's memory holds the
    pool waits for the device: a pool it cannot allocate raises ``InvalidArgumentError`` naming
    ``num_blocks`` (the emulated device a CPU engine runs on has 8 GiB), and nothing is kept.
    """

    def __init__(self, model: Union[str, ModelConfig, Transformer] = "tiny", *, seed: int = 0,
                 dtype: torch.dtype = torch.float32, device: Union[str, torch.device] = "cpu", block_size: int = 16,
                 num_blocks: int = 256, max_batch: int = 32, graphs: Optional[bool] = None,
                 capture: Optional[CaptureOptions] = None):
        for name, value in (("block_size", block_size), ("num_blocks", num_blocks), ("max_batch", max_batch)):
            if isinstance(value, bool) or not isinstance(value, int):  # a wrong type, as the docs say
                raise LifecoreTypeError(f"Engine: {name} must be a positive int, got {type(value).__name__}")
            if value < 1:
                raise InvalidArgumentError(f"Engine: {name} must be a positive int, got {value!r}")
        if not isinstance(model, (str, ModelConfig, Transformer)):
            raise LifecoreTypeError(f"Engine: model must be a preset name, a ModelConfig or a Transformer, "
                                    f"got {type(model).__name__}")
        # Every argument is checked before anything is made: a refused engine leaves nothing behind.
        check_seed("Engine", seed)
        check_float_dtype("Engine", dtype)
        if graphs is not None and not isinstance(graphs, bool):
            raise LifecoreTypeError(f"Engine: graphs must be True, False or None, got {graphs!r}")
        if capture is not None and not isinstance(capture, CaptureOptions):
            raise LifecoreTypeError(f"Engine: capture must be a CaptureOptions or None, got {type(capture).__name__}")
        if graphs is True and capture is not None:
            raise InvalidArgumentError("Engine: graphs=True and capture cannot be had together: the decode graph "
                                       "would replay the step without running the capture hooks; leave graphs "
                                       "to None (chosen off while capturing) or pass graphs=False")
        wanted = _device(device)
        if wanted.type == "cuda" and not torch.cuda.is_available():
            raise InvalidArgumentError(f"Engine: device {device!r}, but this torch has no CUDA device")
        if isinstance(model, str):
            if model not in PRESETS:
                raise InvalidArgumentError(f"Engine: unknown preset {model!r} (presets: {', '.join(PRESETS)})")
            model = PRESETS[model]
        config = model.config if isinstance(model, Transformer) else model
        if capture is not None:  # in the dtype the model's layers will have
            capture.check(config.layers, next(model.parameters()).dtype if isinstance(model, Transformer) else dtype)
        # The scheduler's block table is max_batch x blocks-per-sequence int32: refused where the
        # host could not hold it (2**31 slots asked for 128 GiB at the first generate).
        table_bytes = max_batch * -(-config.max_positions // block_size) * 4
        if table_bytes > _host_memory_bytes():
            raise LifecoreOverflowError(f"Engine: max_batch {max_batch:,} needs a block table of {table_bytes:,} bytes, "
                                        f"more than the host's memory")
        # The KV pool's bytes, checked before the model is built: a block of 2**40 tokens or
        # 2**62 blocks is refused naming the argument, not the coordinator's own.
        if block_size > _MAX_BLOCK_SIZE:
            raise LifecoreOverflowError(f"Engine: argument 'block_size' must be at most {_MAX_BLOCK_SIZE:,} tokens, "
                                        f"got {block_size:,}")
        kv_dtype = next(model.parameters()).dtype if isinstance(model, Transformer) else dtype
        page = page_bytes(config.layers, config.heads, config.head_dim, block_size, kv_dtype)
        if num_blocks + 1 > _MAX_BLOCKS:  # the padding block a graph path holds included
            raise LifecoreOverflowError(f"Engine: argument 'num_blocks' must be at most {_MAX_BLOCKS - 1:,}: a domain "
                                        f"holds at most {_MAX_BLOCKS:,} blocks (its ids are int32), got "
                                        f"{num_blocks:,}")
        if (num_blocks + 1) * page >= 2**63:
            raise LifecoreOverflowError(f"Engine: argument 'num_blocks' asks for a KV pool of {num_blocks:,} blocks of "
                                        f"{page:,} bytes, past 2**63 bytes")
        if isinstance(model, ModelConfig):
            model = Transformer(model, seed=seed, dtype=dtype, device=wanted)
        weights = next(model.parameters())
        if not on_device(weights.device, wanted):
            raise InvalidArgumentError(f"Engine: the model is on {weights.device}, the engine's device is {wanted}")
        self.model = model
        self.device = wanted
        dtype = weights.dtype
        on_cuda = self.device.type == "cuda"
        pools = hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool")
        self.graphs_enabled = bool(on_cuda and pools if graphs is None else graphs) and capture is None
        if self.graphs_enabled and not on_cuda:
            raise InvalidArgumentError("Engine: graphs need a CUDA device")
        if self.graphs_enabled and not pools:
            raise InvalidArgumentError("Engine: graphs need torch.cuda.MemPool (torch 2.6 or later)")
        self.block_size, self.max_batch = block_size, max_batch
        self.max_blocks = -(-config.max_positions // block_size)
        # The KV cache lives on lifecore's memory: the CUDA device's arena, or on a CPU the
        # emulated device's, whose memory is host memory that torch reads through DLPack.
        import lifecore

        self.lifecore_device: Any = (lifecore.Device("cuda", self.device.index or 0) if on_cuda
                                     else lifecore.Device("mock"))
        # The graph path holds one padding block for the rows a bucket pads (and one slot for it).
        padding = 1 if self.graphs_enabled else 0
        try:
            self.coordinator = AdmissionCoordinator(self.lifecore_device,
                                                    domains={DOMAIN: (num_blocks + padding) * page},
                                                    page_bytes=page, tokens_per_page=block_size,
                                                    max_active_sequences=max_batch + padding)
        except DriverError as error:
            self.lifecore_device.close()
            if error.lifecore_status != "out_of_memory":
                raise
            # The one check that needs the device: whether its memory holds the pool.
            raise InvalidArgumentError(
                f"Engine: argument 'num_blocks' asks for a KV pool of {num_blocks + padding:,} blocks of {page:,} "
                f"bytes ({(num_blocks + padding) * page:,} bytes), more than the {self.lifecore_device.backend} "
                f"device can allocate ({error}); nothing was kept") from None
        self.kv = KVCache(self.coordinator, config.layers, config.heads, config.head_dim, block_size, dtype,
                          self.device)
        self.kv.tensor.zero_()  # masked positions are gathered too (their values zeroed before the sum)
        self.memory = LifecoreMemory(self.coordinator, self.kv)
        self.capture = EngineCapture(model, capture) if capture is not None else None
        self.decode_graphs: Optional[DecodeGraphs] = None
        self._padding: Any = None
        if self.graphs_enabled:
            pad_block = self._hold_padding_block()
            self.decode_graphs = DecodeGraphs(model, self.kv.tensor, self.lifecore_device.stream(),
                                              max_batch=max_batch, width=self.max_blocks, pad_block=pad_block)
        self._iteration = 0
        self.closed = False
        # One generate at a time: the memory holds the running step's frames and waiter, and a
        # second run would replace them under the first (its sessions poisoned mid-step).
        self._busy = threading.Lock()  # guards taking _running
        self._running: Optional[object] = None  # the mark of the generate or close under way

    def __repr__(self) -> str:
        config = self.model.config
        state = "closed" if self.closed else f"{self.block_size}-token blocks, max_batch={self.max_batch}"
        return (f"Engine({config.layers} layers, d_model={config.d_model}, device='{self.device}', "
                f"{state}, graphs={self.graphs_enabled}, capture={self.capture is not None})")

    __copy__ = __deepcopy__ = __reduce__ = __reduce_ex__ = _refusal(
        "it owns its device memory, coordinator, graphs and capture in this process (a copy would share them, "
        "and closing it would close them under this engine)", "make another Engine instead")

    def _hold_padding_block(self) -> int:
        decision = self.coordinator.admit(PAD_REQUEST, 1, 1)
        if not isinstance(decision, Admitted):
            raise EngineError(f"Engine: no padding block: {decision}")
        session = decision.resources.open_session()
        frame = session.acquire_frame()
        self._padding = (session, frame)  # the live frame keeps the block's id ours
        return self.kv.block_ids(frame)[0]

    # ---------------------------------------------------------------- the scheduler's model
    def table_width(self, blocks: int) -> int:
        """The block table's width for a batch whose longest sequence holds ``blocks`` blocks:
        the fixed maximum when graphs replay the step (a graph reads a fixed table), else
        ``blocks``."""
        return self.max_blocks if self.graphs_enabled else blocks

    def _forward(self, tokens: list[int], pos: list[int], seq: list[int], table: np.ndarray, prefill: bool,
                 last: list[int]) -> list[int]:
        dev = self.device
        # Token ids as int64 whatever their Python type: a prompt of NumPy uint8 or uint64 ids
        # made a tensor the embedding refused, after the other requests had run.
        inputs = StepInputs(torch.tensor([int(t) for t in tokens], dtype=torch.long, device=dev),
                            torch.tensor(pos, device=dev),
                            torch.tensor(seq, device=dev), torch.from_numpy(table).to(dev), self.kv.tensor)
        capture = self.capture
        completed = False
        try:
            if capture is not None:
                capture.begin(prefill, self._iteration)
            with torch.no_grad():
                logits: torch.Tensor = self.model(inputs)
            completed = True
        finally:
            # Drained whatever ended the forward (a Ctrl-C as begin returned included); a
            # forward that raised never finished its interventions (see EngineCapture.end).
            if capture is not None and capture.session.step_pending:
                capture.end(completed=completed)
        chosen: list[int] = logits[last].argmax(-1).tolist()
        return chosen

    def prefill(self, requests: Sequence[Request], table: np.ndarray) -> list[int]:
        """Runs the prompts (and any tokens a preempted request already generated) of
        ``requests`` eagerly, writing their keys and values through ``table`` (one row per
        request); returns each request's next token (greedy)."""
        tokens: list[int] = []
        pos: list[int] = []
        seq: list[int] = []
        last: list[int] = []
        for row, request in enumerate(requests):
            context = request.tokens
            tokens += context
            pos += range(len(context))
            seq += [row] * len(context)
            last.append(len(tokens) - 1)
        with self._on_stream():
            return self._forward(tokens, pos, seq, table, True, last)

    def decode(self, running: Sequence[Running], table: np.ndarray) -> list[int]:
        """One decode step of the batch ``running`` (the scheduler's :class:`Running` records: a
        request with its KV memory and ``cached`` tokens): each sequence's last token is written to
        the cache through ``table`` and attends to its cached tokens; returns each sequence's
        next token (greedy). Replays the bucket's graph on CUDA with graphs on, else eager."""
        self._iteration += 1
        tokens = [r.request.tokens[-1] for r in running]
        pos = [r.cached for r in running]
        if self.decode_graphs is not None:
            out = self.decode_graphs.run(torch.tensor([int(t) for t in tokens], dtype=torch.long), torch.tensor(pos),
                                         torch.from_numpy(table))
            return out.tolist()
        with self._on_stream():
            return self._forward(tokens, pos, list(range(len(running))), table, False, list(range(len(running))))

    def _on_stream(self) -> Any:
        """Eager work on the graphs' stream, so it is ordered with the replays."""
        if self.decode_graphs is not None:
            return torch.cuda.stream(self.decode_graphs.torch_stream)
        return torch.no_grad()

    # ---------------------------------------------------------------- serving
    def generate(self, requests: Sequence[Request], progress: Optional[Callable[[int], None]] = None) -> Result:
        """Runs every request to completion (or rejection, or until ``Request.cancel()`` stops
        it); the tokens each generated.

        Every request is checked before any runs: a unique str ``request_id``, a non-empty list
        prompt of the model's token ids, ``max_new_tokens`` of at least 1, prompt and output
        within the model's positions, and a fresh request (``generated`` an empty list,
        ``rejected`` None).
        InvalidArgumentError otherwise (LifecoreTypeError for a wrong type, a ``progress`` that is not
        callable included); ClosedError once closed. ``progress``, when given, is called with the
        number of tokens just generated (1, once per token: a count to add to a progress bar's). One generate
        runs at a time: a call while another runs (from another thread, or from a callback or
        hook inside the running one) raises EngineError and leaves the running one alone."""
        return self._alone("Engine.generate: another generate is running on this engine (one runs at a time; "
                           "call again once it returns)", lambda: self._generate(requests, progress))

    def _generate(self, requests: Sequence[Request], progress: Optional[Callable[[int], None]]) -> Result:
        if self.closed:
            raise ClosedError("Engine.generate: the engine is closed")
        if progress is not None and not callable(progress):
            raise LifecoreTypeError(f"Engine.generate: progress must be a callable taking a token count, or None; "
                                    f"got {type(progress).__name__}")
        if isinstance(requests, (Request, str, bytes)) or not isinstance(requests, Iterable):
            hint = " (pass [request] for one)" if isinstance(requests, Request) else ""
            raise LifecoreTypeError(f"Engine.generate: requests must be a list of Request, got "
                                    f"{type(requests).__name__}{hint}")
        requests = list(requests)
        self._check(requests)
        scheduler = Scheduler(self.memory, self, block_size=self.block_size, max_batch=self.max_batch,
                              max_blocks=self.max_blocks, progress=progress)
        # The coordinator's pool counts the padding block, which no request can get: a request
        # that needs it passes the coordinator's check yet would wait for that block forever.
        spare = self.kv.num_blocks - (1 if self._padding is not None else 0)
        for request in requests:
            blocks = -(-request.fit_tokens // self.block_size)
            if blocks > spare:
                request.rejected = f"needs {blocks} blocks of {self.block_size} tokens; the engine has {spare}"
                scheduler.finished.append(request)
            else:
                scheduler.add(request)
        start = time.perf_counter()
        stats = scheduler.run()
        seconds = time.perf_counter() - start
        graphs = self.decode_graphs
        return Result({r.request_id: list(r.generated) for r in scheduler.finished}, stats, seconds,
                      graphs.captures if graphs else 0, graphs.replays if graphs else 0,
                      graphs.pool_kind if graphs else "none",
                      {r.request_id: r.rejected for r in scheduler.finished if r.rejected is not None},
                      [r.request_id for r in scheduler.cancelled])

    def _check(self, requests: Sequence[Request]) -> None:
        config = self.model.config
        seen: set[str] = set()
        counts: list[tuple[Request, int]] = []
        for request in requests:
            if not isinstance(request, Request):
                raise LifecoreTypeError(f"Engine.generate: expected a Request, got {type(request).__name__}")
            if not isinstance(request.request_id, str):
                raise LifecoreTypeError(f"Engine.generate: a request id must be a str, got {request.request_id!r}")
            try:
                request.request_id.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: admission would refuse it after others ran
                raise InvalidArgumentError(f"Engine.generate: request id {request.request_id!r} must be text UTF-8 "
                                           f"can encode") from None
            where = f"Engine.generate: request {request.request_id!r}"
            if request.request_id in seen:
                raise InvalidArgumentError(f"{where} appears twice (request ids key the result)")
            if request.request_id == PAD_REQUEST:
                raise InvalidArgumentError(f"{where}: the id is the engine's own (its padding sequence)")
            seen.add(request.request_id)
            count = request.max_new_tokens
            if isinstance(count, (bool, np.bool_)) or not isinstance(count, Integral):
                raise LifecoreTypeError(f"{where}: max_new_tokens must be a positive int, got {type(count).__name__}")
            count = int(count)  # NumPy's integers taken as the ints they are (an unsigned one wraps in sums)
            counts.append((request, count))
            if count < 1:
                raise InvalidArgumentError(f"{where}: max_new_tokens must be a positive int, got {count!r}")
            prompt = request.prompt
            if not isinstance(prompt, list):
                raise LifecoreTypeError(f"{where}: the prompt must be a list of token ids, got {type(prompt).__name__}")
            if not prompt:
                raise InvalidArgumentError(f"{where}: the prompt must be a non-empty list of token ids")
            for at, token in enumerate(prompt):
                if isinstance(token, (bool, np.bool_)) or not isinstance(token, Integral):
                    raise LifecoreTypeError(f"{where}: token {token!r} at {at} is a {type(token).__name__}, not a "
                                            f"token id (an int, 0..{config.vocab - 1})")
                if not 0 <= token < config.vocab:
                    raise InvalidArgumentError(f"{where}: token {token!r} at {at} is not a token id of the model "
                                               f"(0..{config.vocab - 1})")
            if not isinstance(request.generated, list):  # the engine appends to it, and joins it to the prompt
                raise LifecoreTypeError(f"{where}: generated must be a list (the engine appends the tokens to it), "
                                        f"got {type(request.generated).__name__}")
            if request.rejected is not None and not isinstance(request.rejected, str):
                raise LifecoreTypeError(f"{where}: rejected must be None or a str, got {type(request.rejected).__name__}")
            if request.generated or request.rejected is not None:
                raise InvalidArgumentError(f"{where} has already run (it holds generated tokens or a rejection): "
                                 "pass a new Request")
            positions = len(prompt) + count - 1  # the last generated token is never fed back
            if positions > config.max_positions:
                raise InvalidArgumentError(f"{where}: prompt and output ({len(prompt)} + {count}) need {positions} positions "
                                 f"(the last token is never fed back); the model has {config.max_positions}")
        for request, count in counts:  # every request checked: each count as a Python int, the same value
            request.max_new_tokens = count

    def close(self) -> None:
        """Graphs first (they read the cache), then the padding block and the capture hooks;
        ``generate`` is refused from then on, and a second close does nothing. The lifecore
        device (``lifecore_device``) stays open: the coordinator and the cache on its arena can
        still be read. EngineError while a generate runs (the run reads the graphs and the
        capture hooks), with nothing closed."""
        self._alone("Engine.close: a generate is running on this engine; close it once that returns", self._close)

    def _alone(self, refusal: str, work: Callable[[], _T]) -> _T:
        """``work()`` with the engine marked as running it, or EngineError(``refusal``) when a
        generate or close runs. A mark cleared in a ``finally`` if it is still this call's, not
        a lock held: a Ctrl-C as a lock's acquire returned, before a ``try``, would keep that
        lock held for good."""
        mine = object()
        try:
            self._claim(mine, refusal)
            return work()
        finally:
            if self._running is mine:
                self._running = None

    def _claim(self, mine: object, refusal: str) -> None:
        """Marks the engine as running ``mine``, or raises EngineError(``refusal``) when a
        generate or close runs."""
        with self._busy:
            if self._running is not None:
                raise EngineError(refusal)
            self._running = mine

    def _close(self) -> None:
        self.closed = True
        if self.capture is not None:  # never with graphs: its hooks off first, called from C so
            # that no Python frame a Ctrl-C could stop runs before the loop (as EngineCapture.close)
            finish_despite_interrupts(self.capture.close)
        if self.decode_graphs is not None:
            self.decode_graphs.close()
            self.decode_graphs = None
        if self._padding is not None:
            session, frame = self._padding
            frame.commit()  # the graphs that read the block are gone
            session.try_complete()
            session.close()
            self._padding = None

    def __enter__(self) -> "Engine":
        if self.closed:
            raise ClosedError("Engine.__enter__: the engine is closed; a with block needs one that is not")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
