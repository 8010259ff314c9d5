"""The backends the tests need, named by their role and read from the registry.

Most runtime tests want the emulated device on purpose: it offers fault injection, the pause
hooks and memory limits on host memory. ``EMULATED`` is the registry's name for it
(``lifecore.testing.emulated_backend()``), so no test spells a backend's name.
"""

from lifecore.testing import emulated_backend

EMULATED = emulated_backend()
