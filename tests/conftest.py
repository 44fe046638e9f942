"""The tests are in folders per layer (capture, decode, gro, receive, run, report, cli,
replay, fuzz), beside the package's layers (docs/architecture.md). The helpers they share
live here, at tests/, which pytest puts on ``sys.path`` for this conftest: ``craft.py``
(frame builders), ``live.py`` (the live-kernel fixture), ``where.py`` (the repository's
paths). A test module that uses another's helpers imports it by its package path
(``from tests.gro.test_gro_reference import v4``)."""
