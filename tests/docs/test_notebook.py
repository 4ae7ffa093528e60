"""examples/first_hour.ipynb runs top to bottom on a CPU, as a newcomer runs it, and shows what it says."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "first_hour.ipynb"


def test_the_first_hour_notebook_runs_top_to_bottom(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit it without outputs"
    nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    kinds = [o.output_type for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert "error" not in kinds
    assert "28812 of 368640 bf16 outputs differ (7.8%)" in text  # the quickstart's pinned count
    assert "validated:  yes" in text and "validated on hardware: True" in text
    assert "ReferenceRejectsError" in text  # the refused call is reported, not raised
    assert "2 calls emulated, 0 run natively" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) == 1
