"""What this NumPy's views of a buffer (``numpy.from_dlpack``) can do.

NumPy before 2.2.5 imports every DLPack tensor read-only: before 2.1 it asks for a capsule
without a read-only flag, and up to 2.2.4 it sets read-only whatever the flag says. Such a
view is still its buffer where an operation only reads it (see test_foreign_tensors.py); a
test that writes through one, or has lifecore write it, needs a writable one. Asked of NumPy
itself (a view of one of its own arrays), so no test skips where the views are writable.
NumPy before 1.25 cannot import a DLPack bool tensor at all.
"""

import numpy as np
import pytest

WRITABLE_VIEWS = bool(np.from_dlpack(np.zeros(1)).flags.writeable)
BOOL_VIEWS = np.lib.NumpyVersion(np.__version__) >= "1.25.0"

WRITABLE_VIEWS_REASON = (f"NumPy {np.__version__} imports DLPack tensors read-only "
                         "(writable views need NumPy 2.2.5 or later)")

needs_writable_views = pytest.mark.skipif(not WRITABLE_VIEWS, reason=WRITABLE_VIEWS_REASON)
