# SPDX-License-Identifier: Apache-2.0
"""How rich values travel as JSON, shared by the server and the clients.

* ``bytes``/``bytearray``: a standard base64 string;
* ``numpy.ndarray``: base64 of the ``.npy`` format, always loaded with pickling disabled;
* ``PIL.Image.Image``: base64 of a PNG file (any format Pillow reads is accepted);
* dataclasses: an object of their fields; numpy scalars: the plain number.

numpy and Pillow are imported only when such a value is met.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import functools
import io
import sys
import uuid
from typing import Any

from ucall._ucall import NpyBytes


def b64encode(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Standard base64 by the core's one rule (padding optional, leftover bits zero); a
    ``ValueError`` saying what is wrong on anything else."""
    from ucall._ucall import b64decode as decode

    return decode(text)


def is_ndarray(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def is_numpy_scalar(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.generic)


def is_image(obj: Any) -> bool:
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(obj, image.Image)


def npy_bytes(array: Any) -> bytes:
    """``array`` as a ``.npy`` file."""
    return _npy_file(array, _npy_header(array))


def npy_parts(array: Any) -> Any:
    """``array``'s ``.npy`` file as its header and the array itself, for the native writer
    to write as base64 without joining them (``_ucall.NpyBytes``); ``npy_bytes`` for a
    small array or one that is not C-contiguous."""
    header = _npy_header(array)
    return NpyBytes(header, array) if header is not None and array.nbytes >= 65536 else _npy_file(array, header)


def _npy_file(array: Any, header: bytes | None) -> bytes:
    """``array`` as a ``.npy`` file, given its ``_npy_header``."""
    import numpy as np

    if header is not None:
        # np.save's bytes, copied once: it writes to a BytesIO in chunks, copied again to read.
        return b"".join((header, array.reshape(-1).view(np.uint8)))
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _npy_header(array: Any) -> bytes | None:
    """The version 1 ``.npy`` header of a C-contiguous array; None for any other array
    (``np.save`` then picks the layout and version)."""
    if not array.flags.c_contiguous or array.dtype.hasobject:
        return None
    return _npy_header_of(array.dtype, array.shape)


@functools.lru_cache(maxsize=256)
def _npy_header_of(dtype: Any, shape: tuple[int, ...]) -> bytes | None:
    """numpy's own version 1 header for a C-contiguous array of ``dtype`` and ``shape``,
    made once per kind of array: numpy writes it in Python, which cost as much as base64
    of a 16 KB array."""
    import numpy as np

    header = io.BytesIO()
    fields = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(header, fields)
    except ValueError:  # a header too long for version 1
        return None
    return header.getvalue()


def pack_ndarray(array: Any) -> str:
    return b64encode(npy_bytes(array))


NPY_MAGIC = b"\x93NUMPY"


def unpack_ndarray(data: bytes | bytearray) -> Any:
    """The array in ``data``, a ``.npy`` file; ``ValueError`` saying why not. numpy's own
    messages take other data for a pickle and point to ``allow_pickle=``, which stays off."""
    import numpy as np

    if not data.startswith(NPY_MAGIC):
        raise ValueError("the data is not a .npy array (pickled arrays are refused)")
    if isinstance(data, bytearray):
        array = _view_ndarray(np, data)
        if array is not None:
            return array
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:  # numpy's ValueError mostly; EOFError, SyntaxError from a damaged header
        if "pickle" in str(error):
            raise ValueError("a .npy array of Python objects, which only pickle could load (refused)") from None
        raise ValueError(f"a damaged .npy array: {error}") from None


def _view_ndarray(np: Any, data: bytearray) -> Any:
    """The array of a ``.npy`` version 1 or 2 file in ``data`` as a view of it (no copy, and
    writable as ``np.load``'s arrays are); None for anything else, which ``np.load`` reads."""
    version = bytes(data[6:8])
    if version == b"\x01\x00" and len(data) >= 10:
        end = 10 + int.from_bytes(data[8:10], "little")
    elif version == b"\x02\x00" and len(data) >= 12:
        end = 12 + int.from_bytes(data[8:12], "little")
    else:
        return None
    if end > len(data) or end > 65536 + 12:
        return None
    header = bytes(data[:end])
    # Only small headers are remembered: a caller's large, distinct ones would fill memory.
    read = _npy_header_remembered(header) if end <= 512 else _npy_header_read(header)
    if read is None:
        return None
    shape, fortran_order, dtype = read
    count = 1
    for n in shape:
        count *= n
    offset = end
    if dtype.hasobject or dtype.itemsize == 0 or len(data) - offset != count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape, order="F" if fortran_order else "C")


def _npy_header_read(header: bytes) -> tuple[Any, bool, Any] | None:
    """``(shape, fortran_order, dtype)`` of a whole ``.npy`` header (magic to newline), read
    by numpy; remembered for small headers (``_npy_header_remembered``): numpy parses it
    with ``ast``, which cost more than decoding a 16 KB array."""
    import numpy as np

    stream = io.BytesIO(header)
    try:
        version = np.lib.format.read_magic(stream)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            return None
        found = read(stream)
    except ValueError:
        return None
    return found if stream.tell() == len(header) else None


_npy_header_remembered = functools.lru_cache(maxsize=256)(_npy_header_read)


def image_bytes(image: Any) -> bytes:
    """``image`` as a PNG file."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pack_image(image: Any) -> str:
    return b64encode(image_bytes(image))


class _ViewFile(io.RawIOBase):
    """A read-only file of a ``memoryview``'s bytes, read where they lie (``io.BytesIO``
    would copy them all first)."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view = view
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), len(self._view) - self._at))
        buffer[:n] = self._view[self._at : self._at + n]
        self._at += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._at = base + offset
        return self._at

    def tell(self) -> int:
        return self._at


def unpack_image(data: bytes | memoryview) -> Any:
    """The image of an image file's bytes (a memoryview's read where they lie)."""
    from PIL import Image

    file: Any = _ViewFile(data) if isinstance(data, memoryview) else io.BytesIO(data)
    image = Image.open(file)
    image.load()
    return image


def encode(obj: Any) -> Any:
    """A value the native writer writes for ``obj``, whose type it does not know: a plain
    JSON value, or for a numpy array its ``.npy`` file (a large one as its header and
    itself, which the writer turns into base64 straight in the message, ``npy_parts``).

    Raises ``TypeError`` for an object that has no JSON form.
    """
    if is_ndarray(obj):
        if obj.dtype.hasobject:
            raise TypeError("a numpy array of Python objects (no .npy form without pickle)")
        return npy_parts(obj)
    if is_numpy_scalar(obj):
        return obj.item()
    if is_image(obj):
        return pack_image(obj)
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(obj, pydantic.BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {field.name: getattr(obj, field.name) for field in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if isinstance(obj, memoryview):
        return b64encode(obj)
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return obj.isoformat()
    if isinstance(obj, (uuid.UUID, decimal.Decimal)):
        return str(obj)
    raise TypeError(f"an object of type {type(obj).__qualname__}")


def pack(value: Any) -> Any:
    """A JSON-ready argument for the client: rich values packed as the server unpacks them."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b64encode(value)
    if is_ndarray(value):
        return pack_ndarray(value)
    if is_image(value):
        return pack_image(value)
    if isinstance(value, dict):
        return {k: pack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [pack(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return pack(encode(value))


__all__ = [
    "b64decode",
    "b64encode",
    "encode",
    "npy_bytes",
    "pack",
    "pack_image",
    "pack_ndarray",
    "unpack_image",
    "unpack_ndarray",
]
