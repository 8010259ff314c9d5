"""Types the C++ module's stubs name (its signatures and cpp/bindings/stub_patterns.txt): a stub
file declares no type of its own there, so they are declared here.

They describe what lifecore's calls accept by what it does with them: an array another library
owns is read through DLPack or the CUDA array interface, host bytes through the buffer protocol,
so a checker accepts a torch, CuPy or NumPy array and refuses a ``str`` where one is wanted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, Union

if TYPE_CHECKING:
    from typing_extensions import Buffer, TypeAlias

    HostBuffer: TypeAlias = Buffer
    """Host bytes by the buffer protocol: bytes, bytearray, memoryview, array.array, mmap."""
else:
    HostBuffer = object  # read by checkers only


class SupportsDLPack(Protocol):
    """An array that exports itself through DLPack: a torch tensor, a CuPy or NumPy array, a
    lifecore Buffer or BufferView."""

    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[Any, int]: ...


class SupportsCudaArrayInterface(Protocol):
    """An array that describes its device memory through ``__cuda_array_interface__`` (CuPy,
    Numba, a lifecore Buffer on CUDA)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class CaptureBackend(Protocol):
    """A capture backend as a capture session calls it: at least ``transform`` (the rest, by name,
    as docs/backends.md lists: describe, shape, dtype, estimate, summary_statistics, intervene...)."""

    def transform(self, tensor: Any, request: Any) -> Any: ...


class InterventionEstimator(Protocol):
    """What prices an intervention's evidence: a backend, or anything with ``estimate``."""

    def estimate(self, tensor: Any, request: Any) -> Any: ...


DeviceArray = Union[SupportsDLPack, SupportsCudaArrayInterface]
"""A foreign tensor a stream call takes as memory: anything with DLPack or the CUDA array interface."""

BlockTableOut = TypeVar("BlockTableOut", bound="SupportsDLPack | HostBuffer")
"""What ``AdmissionCoordinator.block_table`` fills and returns: the type of its ``out`` (a NumPy
array, a torch tensor, a lifecore Buffer, any writable buffer)."""

GraphsOption = Literal["auto", "hardware", "software"]
"""What ``Device(graphs=)`` takes: ``'auto'`` (the driver's graphs where it captures them, else
the runtime's), ``'hardware'`` or ``'software'``; anything else is refused at run time."""

GraphsMode = Literal["hardware", "software"]
"""What ``Device.graphs`` answers: the mode ``'auto'`` chose, or the one asked for."""

CaptureModeName = Literal["thread_local", "global", "relaxed"]
"""What ``Device(capture_mode=)`` takes and ``Device.capture_mode`` answers: which calls a
recording forbids, and on which threads (CUDA's and HIP's stream capture modes)."""
