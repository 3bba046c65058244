"""MIR-style research proposals from abstracts with the LLM layer (MIR §4.1, appendix A.1), and MIR
data built from a user's own papers: :class:`ProposalExtractor` (problem and motivation of each
abstract; unusable answers counted, never guessed) and :func:`build_mir_data` (a CSV with the
MIR-MultiCite release columns).  Command line: ``python -m pyterrier_sci.plugins.mir.proposals
--papers papers.jsonl --citations citations.tsv --output my_mir.csv``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import atomic_file
from pyterrier_sci.datasets.mir_multicite import MI_INTENTS
from pyterrier_sci.llm import LLMError, LLMSettings, Usage, settings_from
from pyterrier_sci.llm.client import UsesLLM, extract_json
from pyterrier_sci.llm.text import render, template_or_text, truncate

OWNED = ("problem", "motivation", "proposal", "proposal_unusable")
_ALIASES = {"problem": ("problem", "research_problem", "research problem", "researchproblem"),
            "motivation": ("motivation", "motivations")}
METHODOLOGICAL_INTENTS = MI_INTENTS  # the old name


def parse_proposal(text: str) -> Optional[Dict[str, str]]:
    """``{"problem", "motivation"}`` from a model answer, or ``None`` when it is unusable."""
    obj = extract_json(text or "")
    if obj is None:
        return None
    obj = {str(k).strip().lower(): v for k, v in obj.items()}
    out = {}
    for field, names in _ALIASES.items():
        value = next((obj[n] for n in names if n in obj), None)
        if not isinstance(value, str) or not value.strip():
            return None
        out[field] = " ".join(value.split())
    return out


class ProposalExtractor(UsesLLM, pt.Transformer):
    """LLM extraction of a research proposal (problem + motivation) from each paper's abstract.

    Args:
        llm: client settings (dict, :class:`~pyterrier_sci.llm.LLMSettings` or None = environment).
        template: template name, path or text (``$title``, ``$abstract``).
        abstract_field / title_field: input columns.
        max_abstract_tokens: abstract budget (4 characters a token).
        max_tokens: generation cap.
        on_error: ``"raise"`` (an :class:`LLMError` stops the run) or ``"flag"`` (the row is unusable).
    """

    def __init__(self, llm: Union[None, dict, LLMSettings] = None, template: Optional[str] = None,
                 abstract_field: str = "abstract", title_field: str = "title", max_abstract_tokens: int = 600,
                 max_tokens: int = 400, on_error: str = "raise"):
        if on_error not in ("raise", "flag"):
            raise ValueError("on_error must be 'raise' or 'flag'")
        self.llm = llm
        self.template = template
        self.abstract_field = abstract_field
        self.title_field = title_field
        self.max_abstract_tokens = max_abstract_tokens
        self.max_tokens = max_tokens
        self.on_error = on_error
        self.settings = llm if isinstance(llm, LLMSettings) else settings_from(llm)
        self.usage = Usage(model=self.settings.model)
        self._template_text = template_or_text(template, "mir_proposal.txt", __package__, self.settings.sandbox)
        self._client = None

    def __repr__(self) -> str:
        return f"ProposalExtractor(model={self.settings.model!r})"

    def prompt(self, row: Dict[str, Any]) -> str:
        title = row.get(self.title_field, "") if self.title_field else ""
        return render(self._template_text, title="" if title is None or title != title else title,
                      abstract=truncate(row[self.abstract_field], self.max_abstract_tokens))

    def _extract(self, prompt: str) -> Optional[Dict[str, str]]:
        try:
            return parse_proposal(self.client.generate(prompt, max_tokens=self.max_tokens).text)
        except LLMError:
            if self.on_error == "raise":
                raise
            return None

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.columns(inp, includes=[self.abstract_field])
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in OWNED if c not in inp.columns])
        df = inp.copy()
        empty = df[self.abstract_field].fillna("").astype(str).str.strip() == ""
        prompts = [self.prompt(r) for r in df.to_dict("records")]
        todo = [i for i in range(len(df)) if not empty.iloc[i]]
        results: list = [None] * len(df)
        for i, r in zip(todo, self.client.map(self._extract, [prompts[i] for i in todo], desc="proposals")):
            results[i] = r
        unusable = [r is None for r in results]
        self.usage.add(unusable=int(sum(unusable)))
        df["problem"] = [None if r is None else r["problem"] for r in results]
        df["motivation"] = [None if r is None else r["motivation"] for r in results]
        df["proposal"] = [None if r is None else f"{r['problem']} {r['motivation']}" for r in results]
        df["proposal_unusable"] = unusable
        return df


def build_mir_data(papers: pd.DataFrame, citations: pd.DataFrame, output: Union[str, Path, None] = None,
                   llm: Union[None, dict, LLMSettings, ProposalExtractor] = None) -> pd.DataFrame:
    """MIR-MultiCite-style rows from a user's papers.

    Args:
        papers: ``docno``, ``abstract`` (and ``title``) of the citing and the cited papers.
        citations: ``citing``, ``cited``, ``context``, ``intent`` (MultiCite intents; ``Uses`` /
            ``Extention`` / ``Extension`` are methodological).
        output: a CSV file to write (atomically), with the release's columns.
        llm: client settings, or a configured :class:`ProposalExtractor`.

    Returns the rows; ``attrs``: ``unusable`` (citing papers whose proposal could not be read),
    ``missing`` (citations whose citing or cited paper has no abstract), ``usage``.
    """
    for frame, cols, what in ((papers, ("docno", "abstract"), "papers"),
                              (citations, ("citing", "cited", "context", "intent"), "citations")):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"{what} frame lacks columns {missing} (needs {list(cols)})")
    papers = papers.assign(docno=papers["docno"].astype(str)).drop_duplicates("docno")
    abstract = dict(zip(papers["docno"], papers["abstract"].fillna("").astype(str)))
    title = dict(zip(papers["docno"], papers["title"].fillna("").astype(str))) if "title" in papers.columns else {}
    cit = citations.assign(citing=citations["citing"].astype(str), cited=citations["cited"].astype(str))
    has_abstract = lambda d: bool(abstract.get(d, "").strip())  # noqa: E731
    known = cit["citing"].map(has_abstract) & cit["cited"].map(has_abstract)
    n_missing = int((~known).sum())
    cit = cit[known]
    extractor = llm if isinstance(llm, ProposalExtractor) else ProposalExtractor(llm)
    citing = papers[papers["docno"].isin(set(cit["citing"]))]
    extracted = extractor(citing) if len(citing) else pd.DataFrame(columns=list(citing.columns) + list(OWNED))
    ok = extracted[~extracted["proposal_unusable"].astype(bool)]
    proposal = dict(zip(ok["docno"], ok["proposal"]))
    cit = cit[cit["citing"].isin(proposal)]
    rows = pd.DataFrame({
        "paper_id": cit["citing"].to_numpy(), "actual_ids": cit["citing"].to_numpy(),
        "cited_paper_id": cit["cited"].to_numpy(), "citation_text": cit["context"].fillna("").astype(str).to_numpy(),
        "intent": cit["intent"].astype(str).str.strip().to_numpy(), "gen_id": "user",
        "citing_paper_abstracts": cit["citing"].map(abstract).to_numpy(),
        "cited_paper_abstracts": cit["cited"].map(abstract).to_numpy(),
        "cited_paper_title": cit["cited"].map(lambda d: title.get(d, "")).to_numpy(),
        "inspirational": cit["intent"].astype(str).str.strip().isin(METHODOLOGICAL_INTENTS).astype(int).to_numpy(),
        "proposal": cit["citing"].map(proposal).to_numpy(), "keyword": "",
    })
    rows.attrs.update({"unusable": int(extracted["proposal_unusable"].astype(bool).sum()), "missing": n_missing,
                       "usage": extractor.usage})
    if output is not None:
        with atomic_file(output, "output") as tmp:
            rows.to_csv(tmp, index=False)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyterrier_sci.plugins.mir.proposals",
                                 description="Build MIR-MultiCite-style data (proposals, citations, intents) "
                                             "from your papers.")
    ap.add_argument("--papers", required=True, help="JSONL: docno, title, abstract (citing and cited papers)")
    ap.add_argument("--citations", required=True, help="TSV with header: citing, cited, context, intent")
    ap.add_argument("--output", required=True, help="CSV to write (MIR-MultiCite release columns)")
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--mode", default=None, choices=["chat", "completion", "auto"])
    args = ap.parse_args(argv)
    llm = {k: v for k, v in (("base_url", args.base_url), ("model", args.model), ("mode", args.mode)) if v}
    try:
        papers = pd.read_json(args.papers, lines=True, dtype={"docno": str})
        citations = pd.read_csv(args.citations, sep="\t", dtype=str, keep_default_na=False)
        rows = build_mir_data(papers, citations, args.output, llm)
    except (OSError, ValueError, LLMError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(rows)} citation contexts of {rows['actual_ids'].nunique() if len(rows) else 0} proposals written to "
          f"{args.output}; {rows.attrs['unusable']} unusable extraction(s) skipped, "
          f"{rows.attrs['missing']} citation(s) without abstracts skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
