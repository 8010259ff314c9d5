"""Pure-Python executable reference models, one per lifecycle (no import of lifecore).

Installed as ``lifecore.models``; the state machines in ``lifecore.testing`` drive the
implementation and these models side by side and compare them. What the models share is in
:mod:`.contract`: the error kinds (mirroring the core's ``ErrorKind``) and ``ModelError``.
"""
