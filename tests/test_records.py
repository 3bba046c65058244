"""A researcher's own papers read as records (pyterrier_sci/records.py, docs/corpora.md): the same 50 CSFCube papers
written as JSONL, gzipped JSONL, Zotero-like CSV, TSV, BibTeX, CSL-JSON and a DataFrame read back equal; PDFs made
with fpdf2 give their title, abstract, sections and text; citations from a column and from a separate file; every
bad input is one RecordError naming the file and the line, entry or row; JSONL is streamed."""
import csv
import datetime
import gzip
import itertools
import json
import pickle
import re
import time
import tracemalloc

import pandas as pd
import pytest
from conftest import DATA, needs_data
from fpdf import FPDF

from pyterrier_sci.cli import describe_error
from pyterrier_sci.dates import parse_date
from pyterrier_sci.errors import RecordError, SciError
from pyterrier_sci.records import DEFAULT_FIELDS, FORMATS, RECORD_FIELDS, detect_format, read_records

CSFCUBE = DATA / "csfcube" / "abstracts-csfcube-reconstructed.jsonl"
ACL = DATA / "acl-fulltext"
pytestmark = needs_data("csfcube", "abstracts-csfcube-reconstructed.jsonl")


def _one_line(s):
    return " ".join(s.split())


@pytest.fixture(scope="module")
def papers():
    """The first 50 CSFCube papers: the raw lines and what a record must hold (docno, title, abstract, year)."""
    with open(CSFCUBE, encoding="utf-8") as f:
        raw = [json.loads(line) for line in itertools.islice(f, 50)]
    expected = [{"docno": r["paper_id"], "title": _one_line(r["title"]), "abstract": _one_line(" ".join(r["abstract"])),
                 "year": str(r["year"])} for r in raw]
    assert len(expected) == 50 and all(e["title"] and e["abstract"] and len(e["year"]) == 4 for e in expected)
    return raw, expected


def _check(records, expected, date=lambda e: e["year"]):
    assert [r["docno"] for r in records] == [e["docno"] for e in expected]
    assert [r["title"] for r in records] == [e["title"] for e in expected]
    assert [r["abstract"] for r in records] == [e["abstract"] for e in expected]
    assert [r["date"] for r in records] == [date(e) for e in expected]
    for r in records:
        assert tuple(r) == RECORD_FIELDS and r["citations"] == [] and r["sections"] == [] and r["text"] == ""


# ---------------------------------------------------------------------------------------------------
# the same papers in every format


def test_jsonl_as_released_and_gzipped(papers, tmp_path):
    raw, expected = papers
    path = tmp_path / "papers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raw), encoding="utf-8")   # abstracts as sentence lists
    assert detect_format(path) == "jsonl"
    _check(list(read_records(path)), expected)
    gz = tmp_path / "papers.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        for e in expected:
            f.write(json.dumps({"id": e["docno"], "title": e["title"], "paperAbstract": e["abstract"],
                                "publicationDate": f"{e['year']}-03-01T12:30:00Z"}) + "\n\n")
    assert detect_format(gz) == "jsonl"
    _check(list(read_records(gz)), expected, date=lambda e: f"{e['year']}-03-01")


def _write_csv(path, header, rows, delimiter=","):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)


def test_zotero_csv_with_and_without_a_mapping(papers, tmp_path):
    _, expected = papers
    path = tmp_path / "zotero export.csv"
    header = ["Key", "Item Type", "Publication Year", "Author", "Title", "Abstract Note", "Date", "Extra"]
    _write_csv(path, header, [[e["docno"], "journalArticle", e["year"], "Doe, J.", e["title"], e["abstract"],
                               f"March {e['year']}", "line one\nline two, \"quoted\""] for e in expected])
    mapped = list(read_records(path, fields={"docno": "Key", "title": "Title", "abstract": "Abstract Note",
                                             "date": "Publication Year"}))
    _check(mapped, expected)
    # without a mapping, Zotero's columns are among the defaults; "Date" (month precision) comes before the year
    _check(list(read_records(path)), expected, date=lambda e: f"{e['year']}-03")
    # date= names the column instead
    _check(list(read_records(path, date="Publication Year")), expected)


def test_tsv_dataframe_and_a_list_of_sources(papers, tmp_path):
    _, expected = papers
    path = tmp_path / "papers.tsv"
    _write_csv(path, ["docno", "title", "abstract", "year"],
               [[e["docno"], e["title"], e["abstract"], e["year"]] for e in expected], delimiter="\t")
    assert detect_format(path) == "tsv"
    _check(list(read_records(path)), expected)
    df = pd.DataFrame({"doc_id": [int(e["docno"]) for e in expected], "Title": [e["title"] for e in expected],
                       "Abstract": [e["abstract"] for e in expected], "Year": [int(e["year"]) for e in expected]})
    assert detect_format(df) == "dataframe"
    _check(list(read_records(df)), expected)
    # two sources read in order, one collection (docnos unique across them)
    tail = tmp_path / "tail.tsv"
    _write_csv(tail, ["docno", "title", "abstract", "year"],
               [[e["docno"], e["title"], e["abstract"], e["year"]] for e in expected[20:]], delimiter="\t")
    _check(list(read_records([df.iloc[:20], tail])), expected)
    with pytest.raises(RecordError, match=r"papers.tsv, line 2: docno '\d+' is given twice: here and at the "
                                          r"DataFrame, row 0"):
        list(read_records([df.iloc[:20], path]))


_LATEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "$": r"\$", "#": r"\#",
          "_": r"\_", "~": r"\textasciitilde{}", "^": "{^}", "-": "-{}", "`": "{`}", "'": "{'}", "<": "{<}",
          ">": "{>}"}


def _bibtex_escape(s):
    """LaTeX for a BibTeX field (non-ASCII characters kept: a UTF-8 .bib)."""
    return "".join(_LATEX.get(c, c) for c in s)


def test_bibtex_with_latex_and_months(papers, tmp_path):
    _, expected = papers
    months = ["jan", "{February}", "3", "{Apr.}", "may"]
    entries = [f"@article{{{e['docno']},\n  title = {{{_bibtex_escape(e['title'])}}},\n  author = {{Doe, Jane}},\n"
               f"  abstract = {{{_bibtex_escape(e['abstract'])}}},\n  year = {e['year']},\n"
               f"  month = {months[i % len(months)]}\n}}\n\n" for i, e in enumerate(expected)]
    accented = ("@inproceedings{cafe2021,\n  title = {A {B}ayesian Caf{\\'e} for Na{\\\"i}ve {\\\"U}bersetzung "
                "--- and {$k$}-NN},\n  booktitle = {Proc.},\n  year = {2021},\n  month = sep,\n}\n")
    path = tmp_path / "library.bib"
    path.write_text("@comment{exported}\n" + "".join(entries) + accented, encoding="utf-8")
    assert detect_format(path) == "bibtex"
    records = list(read_records(path))
    month_of = {0: "01", 1: "02", 2: "03", 3: "04", 4: "05"}
    _check(records[:50], expected, date=lambda e: f"{e['year']}-{month_of[expected.index(e) % 5]}")
    cafe = records[50]
    assert cafe["docno"] == "cafe2021" and cafe["date"] == "2021-09" and cafe["abstract"] == ""
    assert cafe["title"] == "A Bayesian Café for Naïve Übersetzung — and $k$-NN"


def test_csl_json_with_date_parts(papers, tmp_path):
    _, expected = papers
    items = [{"id": e["docno"], "type": "article-journal", "title": e["title"], "abstract": e["abstract"],
              "issued": {"date-parts": [[int(e["year"]), 5]]} if i % 3 else {"date-parts": [[e["year"]]]},
              "author": [{"family": "Doe", "given": "Jane"}]} for i, e in enumerate(expected)]
    path = tmp_path / "zotero.json"
    path.write_text(json.dumps(items, indent=1), encoding="utf-8")
    assert detect_format(path) == "csljson"
    _check(list(read_records(path)), expected,
           date=lambda e: e["year"] + ("-05" if expected.index(e) % 3 else ""))


def test_fixed_date_and_field_mappings(papers, tmp_path):
    raw, expected = papers
    path = tmp_path / "papers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raw[:5]), encoding="utf-8")
    fixed = list(read_records(path, date=datetime.date(2024, 6, 1)))
    assert {r["date"] for r in fixed} == {"2024-06-01"}
    assert {r["date"] for r in read_records(path, date=parse_date("2024-06"))} == {"2024-06"}
    # a field mapped to None is left empty; a list of keys: the first with a value
    none = list(read_records(path, fields={"abstract": None, "date": ["published", "year"]}))
    assert [r["abstract"] for r in none] == [""] * 5 and [r["date"] for r in none] == [e["year"] for e in expected[:5]]
    assert set(FORMATS) == set(DEFAULT_FIELDS) and all(set(m) >= set(RECORD_FIELDS) for m in DEFAULT_FIELDS.values())


@pytest.mark.parametrize("value, month, iso", [
    ("2004", None, "2004"), (2004, None, "2004"), (2004.0, None, "2004"), ("2020-5", None, "2020-05"),
    ("2020-05-03T10:00:00Z", None, "2020-05-03"), ("2020-05-03 00:00:00", None, "2020-05-03"),
    ("2020/05/03", None, "2020-05-03"), ("20200503", None, "2020-05-03"), ("D:20200503120000Z", None, "2020-05-03"),
    ("May 2020", None, "2020-05"), ("3 May 2020", None, "2020-05-03"), ("Sept. 3, 2020", None, "2020-09-03"),
    ("2020 May 3", None, "2020-05-03"), ({"date-parts": [[2020, 5, 3]]}, None, "2020-05-03"),
    ({"date-parts": [["2020"]]}, None, "2020"), ({"raw": "2020-05"}, None, "2020-05"),
    (pd.Timestamp("2020-05-03 12:00"), None, "2020-05-03"), (datetime.date(2020, 5, 3), None, "2020-05-03"),
    ("2020", "jan", "2020-01"), ("2020", 12, "2020-12"), ("2020", "September", "2020-09"),
    ("2020-04", "jan", "2020-04"), ("None", None, ""), ("n.d.", None, ""), (float("nan"), "may", ""),
])
def test_dates_in_their_usual_forms(value, month, iso):
    df = pd.DataFrame({"docno": ["d"], "title": ["T"], "date": [value], "month": [month]})
    assert next(read_records(df))["date"] == iso


def test_a_marker_of_no_date_falls_through_and_an_odd_year_is_an_error(tmp_path):
    path = _jsonl(tmp_path, [{"id": "a", "title": "T", "date": "None", "year": 2019},
                             {"id": "b", "title": "T", "year": "801"}])   # CSFCube's data holds such a year
    stream = read_records(path)
    assert next(stream)["date"] == "2019"
    with pytest.raises(RecordError, match=r"line 2: record 'b': its date '801' \(year\) is not a date"):
        next(stream)
    with pytest.raises(RecordError, match=r"the DataFrame, row 1 \(index 'y'\): record 'q': its date '6/15/2019'"):
        list(read_records(pd.DataFrame({"id": ["p", "q"], "title": ["A", "B"], "Date": ["2019", "6/15/2019"]},
                                       index=["x", "y"])))


# ---------------------------------------------------------------------------------------------------
# PDFs


def _pdf(path, title_meta, title, sections, password=None):
    pdf = FPDF()
    if title_meta:
        pdf.set_title(title_meta)
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    pdf.add_page()

    def para(text, size=11):
        pdf.set_font("Helvetica", size=size)
        pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
    para(title, 16)
    para("Jane Doe, University of Somewhere")
    for heading, body in sections:
        para(heading, 12)
        para(body)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))


_BODY = [("Abstract", "We retrieve scientific papers with sparse and dense models and compare them carefully."),
         ("1 Introduction", "Retrieval of scientific papers matters to researchers. " * 12),
         ("2 Method", "We index every paper with BM25 and rank the candidates with a cross-encoder. " * 6)]


def test_a_directory_of_pdfs(tmp_path):
    folder = tmp_path / "pdfs"
    _pdf(folder / "2021" / "smith.pdf", "Sparse Retrieval for Papers", "Sparse Retrieval for Papers", _BODY)
    _pdf(folder / "jones.pdf", None, "Dense Models of Citation", _BODY[:1] + [("1 Introduction", "Citations.")])
    assert detect_format(folder) == "pdf"
    records = list(read_records(folder))
    assert [r["docno"] for r in records] == ["2021/smith", "jones"]
    smith, jones = records
    assert smith["title"] == "Sparse Retrieval for Papers"     # the document information's title
    assert jones["title"] == "Dense Models of Citation"        # no metadata title: the first line
    assert smith["abstract"] == _BODY[0][1]
    assert [s["title"] for s in smith["sections"]] == ["Abstract", "1 Introduction", "2 Method"]
    assert _one_line(smith["sections"][2]["text"]) == _BODY[2][1].strip()
    assert "rank the candidates with a cross-encoder" in smith["text"] and "Jane Doe" in smith["text"]
    assert smith["date"] == "" and smith["citations"] == []
    # one PDF: its stem; its creation date read when mapped
    one = list(read_records(folder / "jones.pdf", fields={"date": "CreationDate"}))
    assert one[0]["docno"] == "jones" and len(one[0]["date"]) == 10


def test_damaged_encrypted_and_empty_pdfs(tmp_path):
    good = tmp_path / "good.pdf"
    _pdf(good, "T", "T", _BODY)
    data = good.read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordError, match=r"cut\.pdf: not a readable PDF .*damaged or cut short"):
        list(read_records(cut))
    locked = tmp_path / "locked.pdf"
    _pdf(locked, "T", "T", _BODY, password="secret")
    with pytest.raises(RecordError, match=r"locked\.pdf: the PDF is encrypted with a password"):
        list(read_records(locked))
    blank = FPDF()
    blank.add_page()
    blank.output(str(tmp_path / "blank.pdf"))
    with pytest.raises(RecordError, match=r"blank\.pdf: no text can be extracted .*OCR"):
        list(read_records(tmp_path / "blank.pdf"))
    (tmp_path / "none").mkdir()
    with pytest.raises(RecordError, match="holds no PDF"):
        list(read_records(tmp_path / "none"))


# ---------------------------------------------------------------------------------------------------
# citations


@needs_data("acl-fulltext", "papers.jsonl")
def test_citations_from_a_column_and_from_a_file(tmp_path):
    with open(ACL / "papers.jsonl", encoding="utf-8") as f:
        raw = [json.loads(line) for line in itertools.islice(f, 40)]
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raw), encoding="utf-8")
    records = list(read_records(path))
    assert [r["citations"] for r in records] == [list(dict.fromkeys(r["references"])) for r in raw]
    assert records[0]["sections"] and records[0]["sections"][0]["title"] == raw[0]["sections"][0]["heading"]
    assert raw[0]["sections"][0]["text"][:200] in records[0]["text"]   # the body from the sections
    # the in-set edges as a separate file (citing<TAB>cited<TAB>source, a header line), without the column
    edges = pd.read_csv(ACL / "edges_inset.tsv", sep="\t", dtype=str)
    ours = {r["id"] for r in raw}
    want = edges[edges.citing.isin(ours)].groupby("citing", sort=False)["cited"].apply(list).to_dict()
    assert want
    from_file = list(read_records(path, fields={"citations": None}, citations=ACL / "edges_inset.tsv"))
    assert {r["docno"]: r["citations"] for r in from_file if r["citations"]} == \
        {k: list(dict.fromkeys(v)) for k, v in want.items()}
    # a CSV column of ';'-separated docnos, and a JSONL citations file added to it
    table = tmp_path / "t.csv"
    _write_csv(table, ["id", "title", "cites"], [["a", "A", "b; c"], ["b", "B", "c,d e"], ["c", "C", ""]])
    cites = tmp_path / "cites.jsonl"
    cites.write_text(json.dumps({"docno": "a", "citations": ["x", "b"]}) + "\n", encoding="utf-8")
    got = {r["docno"]: r["citations"] for r in read_records(table, fields={"citations": "cites"}, citations=cites)}
    assert got == {"a": ["b", "c", "x"], "b": ["c", "d", "e"], "c": []}
    other = tmp_path / "other.tsv"
    other.write_text("p1\tp2\np3\tp1\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"other\.tsv: none of its 2 citing papers is in the collection"):
        list(read_records(table, citations=other))
    broken = tmp_path / "broken.tsv"
    broken.write_text("a\tb\nlonely\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"broken\.tsv, line 2: expected a citing docno and a cited docno"):
        read_records(table, citations=broken)


# ---------------------------------------------------------------------------------------------------
# bad input: one RecordError naming the file and the place


def _jsonl(tmp_path, lines, name="bad.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines))
    return path


GOOD = {"id": "p1", "title": "A paper", "abstract": "About things.", "year": 2020}


@pytest.mark.parametrize("lines, message", [
    ([GOOD, {"id": "p2", "title": "T"}, b'{"id": "p3", "title": "Caf\xe9"}'],
     r"bad\.jsonl, line 3: byte 0xe9 at column \d+ is not utf-8 text"),
    ([GOOD, b'{"id": "p2", "title": "T"'], r"bad\.jsonl, line 2: not valid JSON \(Expecting"),
    ([GOOD, [1, 2]], r"bad\.jsonl, line 2: expected a JSON object per line, found a list"),
    ([GOOD, {"title": "no id"}], r"bad\.jsonl, line 2: the record has no docno \(looked for 'docno', 'doc_id'"),
    ([GOOD, {"id": "p2", "year": 2020}], r"bad\.jsonl, line 2: record 'p2' has no title, abstract or text"),
    ([GOOD, {"id": "p2", "title": "T", "date": "in press"}],
     r"bad\.jsonl, line 2: record 'p2': its date 'in press' \(date\) is not a date"),
    ([GOOD, {"id": "p2", "title": "T", "date": "2020-13"}],
     r"bad\.jsonl, line 2: record 'p2': its date '2020-13' \(date\) is not a date \(no such month or day\)"),
    ([GOOD, {"id": "p2", "title": "T", "year": 2020, "month": "Smarch"}],
     r"bad\.jsonl, line 2: record 'p2': its month 'Smarch' is not a month"),
    ([GOOD, {"id": "p2", "title": "T"}, {"id": " p1 ", "title": "again"}],
     r"bad\.jsonl, line 3: docno 'p1' is given twice: here and at .*bad\.jsonl, line 1"),
    ([], r"bad\.jsonl: no paper record at all"),
    ([b"", b"   "], r"bad\.jsonl: no paper record at all"),
])
def test_bad_jsonl(tmp_path, lines, message):
    with pytest.raises(RecordError, match=message) as e:
        list(read_records(_jsonl(tmp_path, lines)))
    assert isinstance(e.value, (SciError, ValueError)) and "\n" not in describe_error(e.value)


def test_records_before_a_bad_line_come_first(tmp_path):
    stream = read_records(_jsonl(tmp_path, [GOOD, b"{not json"]))
    assert next(stream)["docno"] == "p1"
    with pytest.raises(RecordError, match="line 2"):
        next(stream)


def test_bad_tables(tmp_path):
    path = tmp_path / "bad.csv"
    _write_csv(path, ["Key", "Title", "Date"], [["k1", "T1", "2020"], ["", "T2", "2021"]])
    with pytest.raises(RecordError, match=r"bad\.csv, line 3: the record has no docno"):
        list(read_records(path))
    path.write_bytes(b"Key,Title\nk1,T1\nk2,\"T2 \xff\"\n")
    with pytest.raises(RecordError, match=r"bad\.csv, line 3: byte 0xff"):
        list(read_records(path))
    assert [r["title"] for r in read_records(path, encoding="latin-1")] == ["T1", "T2 \xff"]
    path.write_text("Key,Title,Date\nk1,T1,2020\nk2,\"T2, with a comma\",\"spring\"\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"bad\.csv, line 3: record 'k2': its date 'spring' \(Date\) is not a date"):
        list(read_records(path))
    path.write_text("Key,Title,Date\nk1,T1,2020\nk2,T2\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"bad\.csv, line 3: the row has 2 fields, the header 3 \(the row is cut"):
        list(read_records(path))
    with pytest.raises(RecordError, match=r"the DataFrame: no docno column \(looked for 'docno', 'doc_id'.*the "
                                          r"columns are 'Title', 'DOI': name it with fields="):
        read_records(pd.DataFrame({"Title": ["T"], "DOI": ["10.1/x"]})).__next__()
    assert next(read_records(pd.DataFrame({"Title": ["T"], "DOI": ["10.1/x"]}), fields={"docno": "DOI"}))["docno"] \
        == "10.1/x"
    path.write_text("Key,Title\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"bad\.csv: no paper record at all"):
        list(read_records(path))
    path.write_text("Key,Title\nk1,T1\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"bad\.csv, line 1: no column 'title', .*\(did you mean 'Title'\?\)"):
        list(read_records(path, fields={"title": "title"}))
    with pytest.raises(RecordError, match=r"fields= maps 'abstarct', which is not a field .* docno, title, abstract"):
        read_records(path, fields={"abstarct": "Abstract"})
    with pytest.raises(RecordError, match=r"\.csv, line 1: no column 'Published', which date= names"):
        list(read_records(path, date="Published"))


def test_a_key_no_record_has_is_an_error_at_the_end(tmp_path):
    path = _jsonl(tmp_path, [GOOD], name="p.jsonl")
    with pytest.raises(RecordError, match=r"p\.jsonl: no record has the key\(s\) that fields=/date= name: 'abstract' "
                                          r"-> 'Abstrct'"):
        list(read_records(path, fields={"abstract": "Abstrct"}))


def test_bad_bibtex(tmp_path):
    path = tmp_path / "refs.bib"
    ok = "@article{a1, title={One}, year={2020}}\n"
    path.write_text(ok + "@article{a2, title={Two}, year={2020}}\n@misc{a1, title={Again}}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"refs\.bib, entry 'a1' \(line 3\): docno 'a1' is given twice: here and "
                                          r"at .*refs\.bib, line 1;"):
        list(read_records(path))
    path.write_text(ok + "@article{a2, title={Two}, year={circa 2020}}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"refs\.bib, entry 'a2' \(line 2\): record 'a2': its date 'circa 2020' "
                                          r"\(year\) is not a date"):
        list(read_records(path))
    path.write_text(ok + "@article{a2, title={Two}, month={Smarch}, year=2020}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"entry 'a2' \(line 2\): record 'a2': its month 'Smarch' is not a month"):
        list(read_records(path))
    path.write_text(ok + "@article{a2, title={Two}, title={Again}}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"refs\.bib, entry 'a2' \(line 2\): not valid BibTeX"):
        list(read_records(path))
    path.write_text(ok + "@article{a3, title = {unclosed\n@misc{a4, title={Four}}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"refs\.bib, line 2: not valid BibTeX"):
        list(read_records(path))
    path.write_bytes(ok.encode() + b"@article{a5, title={Ca\xe9}}\n")
    with pytest.raises(RecordError, match=r"refs\.bib, line 2: byte 0xe9 is not utf-8 text"):
        list(read_records(path))
    path.write_text("@comment{nothing here}\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"refs\.bib: no paper record at all"):
        list(read_records(path))


def test_bad_csl_json_gzip_suffix_and_format(tmp_path):
    path = tmp_path / "items.json"
    path.write_text('[{"id": "i1", "title": "One"},\n {"id": "i2", "title": "Two", "issued": {"date-parts": '
                    '[[2020, 14]]}}]', encoding="utf-8")
    with pytest.raises(RecordError, match=r"items\.json, item 2 \(id 'i2'\): record 'i2': its date .* is not a date"):
        list(read_records(path))
    path.write_text('[{"id": "i1", "title": "One"},\n {"id": "i2", "title": }]', encoding="utf-8")
    with pytest.raises(RecordError, match=r"items\.json, line 2: not valid JSON"):
        list(read_records(path))
    path.write_text('[{"title": "One"}]', encoding="utf-8")
    with pytest.raises(RecordError, match=r"items\.json, item 1: the record has no docno"):
        list(read_records(path))
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(("".join(json.dumps({**GOOD, "id": f"p{i}"}) + "\n" for i in range(2000)))
                                 .encode())[:3000])
    with pytest.raises(RecordError, match=r"cut\.jsonl\.gz, after line \d+: the gzip stream is damaged or cut short"):
        list(read_records(gz))
    odd = tmp_path / "papers.xlsx"
    odd.write_bytes(b"x")
    with pytest.raises(RecordError, match=r"papers\.xlsx: cannot tell the format .*format= one of dataframe, jsonl"):
        read_records([CSFCUBE, odd])   # before the stream starts
    with pytest.raises(RecordError, match=r"unknown format 'xml'"):
        read_records(odd, format="xml")
    with pytest.raises(RecordError, match=r"missing\.csv: no such file"):
        read_records(tmp_path / "missing.csv")
    with pytest.raises(RecordError, match=re.escape(f"{tmp_path}: a directory is read as a directory of PDFs")):
        read_records(tmp_path, format="csljson")


def test_record_error_pickles_and_reads_as_one_line():
    e = RecordError("/data/my papers.csv", "record 'k2': its date 'spring' (Date) is not a date", "line 3")
    again = pickle.loads(pickle.dumps(e))
    assert (again.path, again.where, again.problem) == (e.path, e.where, e.problem) and str(again) == str(e)
    assert describe_error(e) == "/data/my papers.csv, line 3: record 'k2': its date 'spring' (Date) is not a date"
    assert isinstance(e, ValueError) and isinstance(e, SciError)


# ---------------------------------------------------------------------------------------------------
# streaming


def test_the_first_record_of_a_large_jsonl_comes_without_reading_the_file(tmp_path):
    path = tmp_path / "large.jsonl"
    with open(CSFCUBE, encoding="utf-8") as f:
        sample = [json.loads(line) for line in itertools.islice(f, 100)]
    chunk = "".join(json.dumps({"docno": f"{{n}}-{i}", "title": r["title"], "abstract": r["abstract"][0],
                                "year": r["year"]}) + "\n" for i, r in enumerate(sample))   # ~60 MB in all
    with open(path, "w", encoding="utf-8") as f:
        for n in range(2000):   # 200,000 lines
            f.write(chunk.replace("{n}", str(n)))
    size = path.stat().st_size
    assert size > 40_000_000
    tracemalloc.start()
    try:
        start = time.perf_counter()
        stream = read_records(path)
        first = next(stream)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    stream.close()
    path.unlink()   # 60 MB
    assert first["docno"] == "0-0" and first["title"] == _one_line(sample[0]["title"])
    assert elapsed < 2.0, f"the first record took {elapsed:.2f} s"
    assert peak < size / 100, f"reading the first record allocated {peak} bytes of a {size}-byte file"
