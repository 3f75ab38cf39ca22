"""The shipped notebook, executed headless against the CPU recipe as a user would run it
(the ``notebook_run`` fixture, tests/conftest.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_walkthrough_runs_headless_and_shows_its_results(notebook_run):
    nb, ws = notebook_run
    # The jobs wrote into the workspace the notebook named.
    assert list(ws.rglob("global_step_2")), "no step-2 checkpoint"
    assert list(ws.rglob("model.safetensors")), "no merged model"
    text = "\n".join(str(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "latest checkpoint step: 2" in text
    # The evaluation table and the plots are shown inline.
    table_cell = next(c for c in nb.cells if "pd.read_csv" in c.source)
    html = "".join(o.get("data", {}).get("text/html", "") for o in table_cell.outputs)
    assert "accuracy" in html and "<table" in html
    plot_cell = nb.cells[-1]
    assert any("image/png" in o.get("data", {}) for o in plot_cell.outputs), "no inline plot"
