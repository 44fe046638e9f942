"""Decode layer: RecordBatch (capture/) -> packet columns (Arrow, schema in schema.py).

Two decoders produce the same table: ``reference`` (dpkt) and, later, ``fast`` (numba).
"""
