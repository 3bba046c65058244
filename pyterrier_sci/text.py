"""Full papers cut into overlapping token windows (chunks), and chunk corpora as ir_datasets ids
(``<corpus>/chunks-<unit>``, documents :class:`ChunkDoc` with docnos ``<paper>%p<i>``) that ``bm25``,
``dense`` and ``colbert`` index with no new code.  The contract and the registered units:
``docs/prism.md`` ("Chunk corpora").
"""
import itertools
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Union

import pandas as pd
import pyterrier as pt

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.irds import FnDocs, register

__all__ = ["ChunkDoc", "chunk_documents", "default_stride", "paper_docno", "register_chunk_corpus",
           "chunk_corpus_id", "STANDARD_UNITS", "resolve_tokenizer"]

SEPARATOR = "%p"

#: The units registered for every full-text corpus of the toolkit: unit -> stride (None: default).
STANDARD_UNITS: Dict[int, Optional[int]] = {128: None, 256: None, 512: None, 3000: None, 6000: None}


class ChunkDoc(NamedTuple):
    doc_id: str
    paper_id: str
    title: str
    body: str
    text: str

    def default_text(self) -> str:
        return self.text


def default_stride(unit: int) -> int:
    """``unit - unit // 4``: windows overlap by a quarter of their length."""
    return unit - unit // 4


def paper_docno(docno: str) -> str:
    """``"A00-1020%p3"`` -> ``"A00-1020"`` (a docno without ``%p`` is returned as it is)."""
    return docno.split(SEPARATOR, 1)[0]


def chunk_corpus_id(corpus: str, unit: int) -> str:
    return f"{corpus}/chunks-{unit}"


def resolve_tokenizer(tokenizer: Any):
    """``None`` (whitespace words), a tokenizer object, or the name/path of a Hugging Face tokenizer."""
    if tokenizer is None or (hasattr(tokenizer, "tokenize") and hasattr(tokenizer, "convert_tokens_to_string")):
        return tokenizer
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(tokenizer)
    raise TypeError("tokenizer must be None, an object with tokenize() and convert_tokens_to_string(), "
                    f"or the name of a Hugging Face tokenizer; got {type(tokenizer).__name__}")


def _as_record(doc: Any, text_field: str, title_field: Optional[str]) -> Dict[str, str]:
    if isinstance(doc, dict):
        get = doc.get
    else:
        def get(k, default=None):
            return getattr(doc, k, default)
    docno = get("docno") or get("doc_id")
    if docno is None:
        raise ValueError("each document needs a 'docno' (or 'doc_id')")
    text = get(text_field)
    if text is None:
        raise ValueError(f"document {docno} has no field {text_field!r}")
    title = get(title_field) if title_field else ""
    return {"docno": str(docno), "title": "" if title is None else str(title), "body": " ".join(str(text).split())}


def chunk_documents(docs: Union[pd.DataFrame, Iterable[Any]], unit: int = 256, stride: Optional[int] = None,
                    tokenizer: Any = None, text_field: str = "text", title_field: Optional[str] = "title",
                    join: str = " ", batch_size: int = 256, verbose: bool = False) -> Iterator[ChunkDoc]:
    """Cuts documents into windows of ``unit`` tokens advancing by ``stride`` (see the module doc).

    Windows come from ``pt.text.sliding`` (applied ``batch_size`` documents at a time); the final
    window that it drops (the tail shorter than a full step) is added, ending at the last token.

    Args:
        docs: a DataFrame or an iterable of dicts / NamedTuples with ``docno`` (or ``doc_id``),
            ``text_field`` and (optionally) ``title_field``.
        unit: window length in tokens.
        stride: step between window starts (default :func:`default_stride`); ``1 <= stride <= unit``.
        tokenizer: see :func:`resolve_tokenizer`.
        text_field, title_field: the fields holding the full text and the title (``None``: no title).
        join: what joins the title and the window.
        verbose: a progress bar over documents.

    Yields:
        :class:`ChunkDoc` in document order, windows in reading order.
    """
    if unit < 1:
        raise ValueError(f"unit must be a positive number of tokens, not {unit}")
    stride = default_stride(unit) if stride is None else stride
    if not 1 <= stride <= unit:
        raise ValueError(f"stride must be between 1 and unit ({unit}), not {stride}")
    tok = resolve_tokenizer(tokenizer)
    tokenize = tok.tokenize if tok is not None else str.split
    detokenize = tok.convert_tokens_to_string if tok is not None else " ".join
    slider = pt.text.sliding(text_attr="body", length=unit, stride=stride, prepend_attr=None, tokenizer=tok)
    records = (_as_record(d, text_field, title_field) for d in
               (docs.to_dict("records") if isinstance(docs, pd.DataFrame) else docs))
    bar = pt.tqdm(desc=f"chunking ({unit} tokens)", unit="doc", disable=not verbose)
    while batch := list(itertools.islice(records, batch_size)):
        frame = pd.DataFrame(batch)
        passages = slider(frame[["docno", "body"]]) if len(frame) else frame
        by_doc: Dict[str, List[str]] = {}
        for docno, body in zip(passages["docno"], passages["body"]):
            by_doc.setdefault(docno.rsplit(SEPARATOR, 1)[0], []).append(body)
        for rec in batch:
            bodies = by_doc.get(rec["docno"]) or [""]
            toks = tokenize(rec["body"]) if rec["body"] else []
            n = len(toks)
            if n > unit and (n - unit) % stride:
                bodies = bodies + [detokenize(toks[n - unit:])]  # the tail pt.text.sliding drops
            for i, body in enumerate(bodies):
                body = body.strip()
                text = join.join(x for x in (rec["title"].strip(), body) if x)
                yield ChunkDoc(f"{rec['docno']}{SEPARATOR}{i}", rec["docno"], rec["title"], body, text)
        bar.update(len(batch))
    bar.close()


def register_chunk_corpus(corpus: str, unit: int, stride: Optional[int] = None, name: Optional[str] = None,
                          tokenizer: Any = None, text_field: str = "text", title_field: Optional[str] = "title",
                          docs_fn: Optional[Callable[[], Iterable[Any]]] = None) -> str:
    """Registers ``<corpus>/chunks-<unit>`` (or ``name``): the chunks of ``corpus``'s documents as an
    ir_datasets corpus of :class:`ChunkDoc`.  Nothing is read until the corpus is used.

    Args:
        corpus: the ir_datasets id of the full-paper corpus (``irds:`` prefix allowed).
        unit, stride, tokenizer, text_field, title_field: see :func:`chunk_documents`.
        name: the id to register (default ``<corpus>/chunks-<unit>``).
        docs_fn: where the documents come from (default ``ir_datasets.load(corpus).docs_iter()``).

    Returns:
        the registered id.
    """
    import ir_datasets

    corpus = irds_id(corpus)
    name = name or chunk_corpus_id(corpus, unit)

    def docs():
        source = docs_fn() if docs_fn is not None else ir_datasets.load(corpus).docs_iter()
        return chunk_documents(source, unit=unit, stride=stride, tokenizer=tokenizer, text_field=text_field,
                               title_field=title_field)

    step = default_stride(unit) if stride is None else stride
    register(name, FnDocs(name, docs, ChunkDoc), documentation={
        "desc": f"{corpus} cut into windows of {unit} tokens, stride {step} "
                f"(docno <paper>%p<i>; text = title + window; pyterrier_sci.text)"})
    return name
