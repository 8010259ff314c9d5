"""A DLPack producer whose description says whatever a test asks (ndim, shape, strides), over
memory the test owns: for the checks a consumer must make of a producer it cannot trust."""

from __future__ import annotations

import ctypes


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Managed(ctypes.Structure):  # DLManagedTensorVersioned
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Producer:
    """Host memory at `address` (+ `byte_offset`) described as float32 (or `bits`-bit floats) of
    `shape`; `ndim` overrides len(shape), `null_shape` gives no shape array. The capsule has no deleter: this
    object keeps what it points at, and the consumer keeps this object."""

    def __init__(self, address: int, shape, *, bits: int = 32, ndim: int | None = None,
                 null_shape: bool = False, device: tuple[int, int] = (1, 0), on_export=None,
                 byte_offset: int = 0, code: int = 2) -> None:
        self.address, self.shape, self.bits = address, list(shape), bits
        self.byte_offset = byte_offset  # added to address by the consumer (DLPack's data + byte_offset)
        self.code = code  # DLPack's type code: 2 float, 0 signed int
        self.ndim = len(self.shape) if ndim is None else ndim
        self.null_shape = null_shape
        self.device = device  # DLPack's (type, id); the CPU unless a test says otherwise
        self.on_export = on_export  # called with the consumer's stream, as a producer orders it
        self._keep: list[object] = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kw):
        if self.on_export is not None:
            self.on_export(stream)
        shape = (ctypes.c_int64 * max(1, len(self.shape)))(*self.shape)
        tensor = _Tensor(self.address, _Device(*self.device), self.ndim, _DataType(self.code, self.bits, 1),
                         None if self.null_shape else shape, None, self.byte_offset)
        managed = _Managed(_Version(1, 0), None, None, 0, tensor)
        self._keep.append((shape, managed))
        return _capsule_new(ctypes.addressof(managed), b"dltensor_versioned", None)
