"""The published figures are what ``bench/render.py`` makes of ``bench/figures.json``.

``bench/README.md`` and ``docs/performance.md`` carry each benchmark's block between marker
comments; both are rendered from the one results file, so they cannot disagree with each other
or with the data. Re-render with ``python bench/render.py`` (or re-measure with
``python bench/run_all.py --write-docs``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import render  # noqa: E402 - bench/ is not a package


def _figures() -> dict[str, Any]:
    return render.load_figures()


def test_every_benchmark_has_committed_figures() -> None:
    figures = _figures()
    assert list(figures) == [name for name, _ in render.SCRIPTS]
    for name, data in figures.items():
        assert data["table"].strip(), name
        assert data["command"].startswith("python bench/bench_"), name
        assert "--tiny" not in data["command"], f"{name}: a smoke run is not a figure"
        assert len(data["machine"]["load_at_start"]) == 3, name


@pytest.mark.parametrize("document", render.DOCUMENTS, ids=lambda p: p.name)
def test_the_document_is_what_the_renderer_makes_of_the_figures(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    assert render.render_document(text, _figures(), where=str(document)) == text, (
        f"{document} differs from bench/figures.json: run `python bench/render.py`"
    )


def test_both_documents_show_the_same_blocks() -> None:
    figures = _figures()
    texts = [p.read_text(encoding="utf-8") for p in render.DOCUMENTS]
    for name, data in figures.items():
        rendered = render.block(name, data)
        assert all(rendered in text for text in texts), name
        assert data["table"].strip() in rendered


def test_a_block_is_replaced_between_its_markers_only() -> None:
    figures = {
        name: {
            "machine": {"when": "then", "load_at_start": [1, 2, 3], "load_at_end": [4, 5, 6]},
            "command": f"python bench/{script}",
            "table": f"| {name} |\n|---|\n| 1 |",
        }
        for name, script in render.SCRIPTS
    }
    doc = "intro\n\n" + "\n\nprose\n\n".join(
        f"<!-- bench:{name}:start -->\nold figures\n<!-- bench:{name}:end -->"
        for name, _ in render.SCRIPTS
    )
    out = render.render_document(doc, figures, where="doc")
    assert out.startswith("intro\n\n<!-- bench:economy:start -->\nMeasured then")
    assert "old figures" not in out
    assert out.count("\n\nprose\n\n") == len(render.SCRIPTS) - 1
    assert "load average (1 / 5 / 15 min) 1.0 / 2.0 / 3.0 at the start" in out
    assert "Command: `python bench/bench_faults.py`\n\n| faults |" in out
    assert render.render_document(out, figures, where="doc") == out  # idempotent
    with pytest.raises(ValueError, match="expected one <!-- bench:cpu:start -->"):
        render.render_document(out.replace("<!-- bench:cpu:end -->", ""), figures, where="doc")
    del figures["online"]
    with pytest.raises(ValueError, match="no figures for 'online'"):
        render.render_document(out, figures, where="doc")


def test_collect_merges_new_results_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = tmp_path / "figures.json"
    old = {name: {"table": f"old {name}"} for name, _ in render.SCRIPTS}
    figures.write_text(json.dumps(old), encoding="utf-8")
    results = tmp_path / "results"
    results.mkdir()
    (results / "economy.json").write_text(json.dumps({"table": "new economy"}), "utf-8")
    monkeypatch.setattr(render, "FIGURES", figures)
    monkeypatch.setattr(render, "DOCUMENTS", ())
    assert render.main(["--collect", str(results)]) == 0
    merged = json.loads(figures.read_text(encoding="utf-8"))
    assert merged["economy"] == {"table": "new economy"}
    assert merged["faults"] == {"table": "old faults"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


def test_the_render_command_finds_the_committed_documents_up_to_date() -> None:
    proc = _run(str(BENCH / "render.py"), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_tiny_run_cannot_write_the_figures() -> None:
    proc = _run(str(BENCH / "run_all.py"), "--tiny", "--write-docs")
    assert proc.returncode == 2
    assert "tiny runs are plumbing checks, not figures" in proc.stderr
    proc = _run(str(BENCH / "run_all.py"), "--only", "economy,nope")
    assert proc.returncode == 2
    assert "unknown benchmark(s) nope" in proc.stderr
