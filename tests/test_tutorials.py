"""The tutorials run as written: every ```python block of each page under docs/tutorials/ is executed, in order, in
one namespace, in a fresh directory with a fresh work directory, so a renamed parameter or component fails here,
not in a reader's hands."""
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import ROOT, needs_data

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(page: Path):
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_every_tutorial_has_code():
    assert TUTORIALS and all(blocks(p) for p in TUTORIALS)


@needs_data("csfcube")
@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_the_tutorial_runs_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    namespace = {"__name__": f"tutorial_{page.stem}"}
    ray_before = _ray_running()
    try:
        for i, code in enumerate(blocks(page), 1):
            try:
                exec(compile(code, f"{page.relative_to(ROOT)} (block {i})", "exec"), namespace)  # noqa: S102
            except Exception as e:  # noqa: BLE001 - name the page and block
                raise AssertionError(f"{page.relative_to(ROOT)}, code block {i} fails: {type(e).__name__}: {e}") from e
    finally:
        ray_left = not ray_before and _ray_running()
        if ray_left:  # a page that failed midway (or forgot): the rest of the suite must not inherit its Ray
            sys.modules["ray"].shutdown()
    assert not ray_left, f"{page.relative_to(ROOT)} leaves Ray running: a page that starts Ray shuts it down"
    assert os.listdir(tmp_path)


def _ray_running() -> bool:
    ray = sys.modules.get("ray")   # imported only by a page (or test) that uses it
    return ray is not None and ray.is_initialized()


@needs_data("csfcube")
def test_the_readme_example_runs_as_written():
    """The README's first example, as written (in the suite's work directory: the indexes it builds are shared)."""
    (code,) = blocks(ROOT / "README.md")[:1]
    namespace = {"__name__": "readme_example"}
    exec(compile(code, "README.md (the first example)", "exec"), namespace)  # noqa: S102
    table = namespace["ps"].Experiment([namespace["bm25"], namespace["hybrid"]], namespace["ds"].get_topics(),
                                       namespace["ds"].get_qrels(), ["NDCG%20"], dataset="sci/csfcube/method",
                                       names=["BM25", "RRF"])
    assert list(table["name"]) == ["BM25", "RRF"] and table["NDCG%20"].between(0.3, 0.7).all()
