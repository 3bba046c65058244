"""The medium tier of every declared reproduction, verified: the rows marked ``medium`` (cheap rows of every paper
that run its own code: measures, baselines, PRISM's paper fields, HLM-Cite's keyword rule) computed afresh
(`pyterrier-sci reproduce --tier medium --verify`: no saved run read back) exactly as the full tier runs them, and
compared with the full tier's recorded figures.  A change to a paper's code that moves a recorded full-tier
figure beyond its drift bound fails here, in CI, not in a user's hands."""
import pytest
from conftest import DATA

from pyterrier_sci import reproduce as R

DATA_OF = {"sciface": "csfcube", "mir": "mir-multicite", "doris_mae": "doris-mae", "prism": "acl-fulltext",
           "hlm_cite": "hepth-citations"}
TABLES = [(p.id, t.key) for p, t in R.select() if any("medium" in s.tiers for s in t.systems.values())]


@pytest.mark.parametrize("paper,table", TABLES, ids=[f"{p}/{t}" for p, t in TABLES])
def test_medium_tier_verifies_the_recorded_full_tier_figures(paper, table):
    if not (DATA / DATA_OF.get(paper, paper)).exists():
        pytest.skip(f"no data for {paper} under {DATA}")
    (res,) = R.reproduce(f"{paper}/{table}", tier="medium", verify=True)
    medium = [s.name for s in R.load_paper(paper).tables[table].systems.values() if "medium" in s.tiers]
    assert res.tier == "full" and sorted({c.system for c in res.cells}) == sorted(medium)
    declared = R.load_paper(paper).tables[table].systems
    assert res.read_back == () and set(res.computed) >= {s for s in medium if declared[s].pipeline}
    assert all(c.reproduced is not None and c.recorded is not None for c in res.cells)
    assert not res.failed, "\n".join(f"{c.system} {c.dataset} {c.measure}: {c.reason}" for c in res.failed)
