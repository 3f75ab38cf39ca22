"""The shipped notebook, executed headless against the CPU recipe as a user would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "npu_rl_walkthrough.ipynb"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _with_parameters(nb, **values) -> None:
    """Replace the cell tagged `parameters` (papermill's convention) with ``values``."""
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    for name in values:
        assert f"{name} =" in cell.source, name
    cell.source = "\n".join(f"{k} = {v!r}" for k, v in values.items())


def test_walkthrough_runs_headless_and_shows_its_results(tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    _with_parameters(nb, RECIPE="tiny_math_cpu", STEPS=2, EVAL_LIMIT=8, WORKSPACE=str(tmp_path / "ws"))
    monkeypatch.setenv("RAY_ADDRESS", "")  # a fresh local cluster, whatever the caller's shell says
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()

    ws = tmp_path / "ws"
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
