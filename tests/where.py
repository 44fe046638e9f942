"""Where the repository's files are, for tests that need a path at import time (the
fixtures of conftest.py give the same)."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
SAMPLES = os.path.join(ROOT, "sample_pcaps")
