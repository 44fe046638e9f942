"""The one analysis core and what it runs on.

``options``: the run options (models, decoder, engine, egress) defined and checked once;
``inputs``: paths -> capture files -> decoded batches (one loop for every entry point);
``accumulators``: what a run counts batch by batch (``add``) and across partitions
(``merge``), rendered by ``report/``; ``core``: inputs -> decoded batches -> GRO with the
engine state carried from batch to batch -> accumulators -> sinks (Parquet writers, the
in-memory Analysis).
"""
