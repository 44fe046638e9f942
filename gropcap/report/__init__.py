"""Report layer: an Analysis (pipeline.py) -> tables, summaries, text for people."""
