"""Step-time models and the profiles behind them.

- ``base``: the ``StepBatch`` / ``StepTimeModel`` interface the engine calls.
- ``config``: the ``step_time`` config section (kinds simple, roofline, measured).
- ``simple``, ``roofline``, ``measured``: the three models; ``build`` picks one.
- ``architecture``, ``hardware``, ``profiles``: model and hardware profiles and what is
  derived from them; ``memory``: KV blocks from GPU memory; ``report``: ``pdsim profile``.

See docs/step-time.md.
"""
