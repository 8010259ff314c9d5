"""lifecore's benchmarks, installed as ``lifecore.benchmarks`` (from the source tree's
``benchmarks/`` folder). Each one times its sides with :mod:`lifecore.benchmarks.harness`:
interleaved in one run, medians with their interquartile range, ratios taken per round, and
nothing printed that the run did not measure.

- :mod:`~lifecore.benchmarks.graph_replay`: graph replay vs eager issue (per launch, per node),
  the capture cycle, and torch / CuPy graphs on cuda;
- :mod:`~lifecore.benchmarks.capture_cycle`: the capture lifecycle vs the reference model;
- :mod:`~lifecore.benchmarks.state_machine`: seeded state-machine steps per second;
- :mod:`~lifecore.benchmarks.sequence`: sequence lifecycles and decode steps (Python, C++,
  reference model, a free list);
- :mod:`~lifecore.benchmarks.capture`: capture-session ``observe`` and a hooked forward pass;
- :mod:`~lifecore.benchmarks.differential`: the same seeded steps on two devices (counts, no timing).

Run one as ``python -m lifecore.benchmarks.NAME``; ``lifecore bench`` runs the graph-capture ones.
"""
