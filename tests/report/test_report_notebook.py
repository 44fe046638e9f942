"""docs/example.ipynb runs top to bottom in a fresh kernel and renders its plots."""

from __future__ import annotations

import os

import pytest

from where import TESTS

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install nbformat)")
nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install nbclient)")
pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install ipykernel)")
pytest.importorskip("matplotlib", reason="matplotlib not installed")

DOCS = os.path.join(TESTS, "..", "docs")


def test_example_notebook_executes_and_renders_plots():
    nb = nbformat.read(os.path.join(DOCS, "example.ipynb"), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": DOCS}})
    client.execute()       # raises CellExecutionError on any failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3, "plot_segments, plot_ratio_over_time, plot_reasons_per_flow"
    # the explain cell printed a walk of the bulk flow
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "super-packets, aggregation ratio" in text
    assert "pkt     time_us" in text
