"""Pure-Python reference models of lifecore's lifecycles (no import of lifecore)."""
