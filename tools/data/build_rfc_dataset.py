#!/usr/bin/python3
"""Builds the long-document summarization corpus from RFCs: introduction (or body) -> abstract.

Python 3 standard library only. The RFCs come from Debian's doc-rfc-* packages (non-free component).
--fetch downloads and unpacks them into a private directory, without touching the system's apt
configuration (a sources list, apt lists and cache of its own under FETCH_DIR):

    /usr/bin/python3 tools/data/build_rfc_dataset.py --fetch data/rfc-debs --out data/rfc
    # later runs: --rfc-dir data/rfc-debs/root/usr/share/doc/RFC (what --fetch unpacked)

Input: an RFC directory as the packages install it (/usr/share/doc/RFC). Its links/ folder holds
rfcN.json (the RFC Editor's metadata: title, abstract, obsoletes, obsoleted_by, ...) and rfcN.txt.gz
for every RFC; the category folders are read when links/ is absent.

Output: OUT/{train,validation,test}.jsonl, one {"id", "document", "summary"} object per line, sorted
by id ("rfc791"), and OUT/stats.json with the counts and length statistics that are also printed.
Licence: the IETF Trust's terms allow using RFC text for training and evaluation here; the corpus is
generated on the user's machine and must not be redistributed (it is never committed).

Summary: the abstract from the metadata, paragraphs (blank-line separated) joined by "\\n", lines
joined with single spaces. Document (--document):
  * introduction (default): the section whose heading is "N. Introduction..." (or an unnumbered
    "Introduction") at the start of a line, outside the table of contents, with its subsections, up to
    the next top-level section;
  * body: from that heading up to the references, acknowledgements, authors' addresses or appendices.
Page breaks are removed (form feeds, the page footer "... [Page N]" and the running header "RFC N ...
Month Year" or an old-style dated header block), paragraphs are re-flowed to one line each and joined
by "\\n", and figures (paragraphs with few letters: ASCII art, tables, code) are dropped.

Filters, in this order (each removed RFC is counted under its reason): no metadata or text; no
abstract; no introduction heading; document under --min-doc-words (50) or over --max-doc-words (2000;
bodies are cut at that many words instead of dropped with --document body); abstract under
--min-summary-words (10) or over --max-summary-words (400) words; abstract copied from the document
(its token sequence occurs in the document's); duplicate (document, summary) pairs (smallest RFC
number kept).

Split: RFCs are grouped over their obsoletes / obsoleted-by links (union-find), so a document and its
revisions never straddle splits; a group's representative is its smallest RFC number and the group goes
to train / validation / test by sha256("rfc<number>") mod 10000 against --split (default 90/5/5),
with the same rule as the Debian corpus (build_dataset.py).
"""

import argparse
import collections
import gzip
import json
import os
import re
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_dataset as common  # noqa: E402  (shared grouping, split and statistics code)

RFC_PACKAGES = (
    "doc-rfc-experimental",
    "doc-rfc-fyi-bcp",
    "doc-rfc-informational",
    "doc-rfc-misc",
    "doc-rfc-old-std",
    "doc-rfc-others",
    "doc-rfc-std",
    "doc-rfc-std-proposed",
)
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
FOOTER_RE = re.compile(r"\[Page \d+\]\s*$")
HEADER_RE = re.compile(r"^\s*RFC[ -]?\d+\b|\b(%s)\s+\d{4}\s*$" % MONTHS)
INTRO_RE = re.compile(r"^(?:(\d+)\.?|[IVX]+\.)?\s*(introduction|intro\.)\b[^.]*$", re.IGNORECASE)
NUMBERED_RE = re.compile(r"^(\d+)(?:\.\d+)*\.?\s+\S")
APPENDIX_RE = re.compile(r"^(?:[A-Z]\.|appendix\b)", re.IGNORECASE)
TOC_RE = re.compile(r"\.{4,}|\s\d+\s*$")
END_OF_BODY_RE = re.compile(
    r"^(?:\d+(?:\.\d+)*\.?\s+)?(?:(?:normative|informative|informational)\s+)?"
    r"(?:references|bibliography|acknowledge?ments?|authors?'?s?'?\s+address(?:es)?|appendix|"
    r"full copyright|intellectual property|editors?'?s?'?\s+address(?:es)?|contributors)\b",
    re.IGNORECASE,
)
RFC_NUMBER_RE = re.compile(r"^rfc0*(\d+)$", re.IGNORECASE)


# ------------------------------------------------------------------------------------------------
# Text of one RFC


def remove_page_breaks(text):
    """The RFC's lines with form feeds, page footers and running headers removed."""
    pages = text.replace("\r", "").split("\f")
    out = []
    for number, page in enumerate(pages):
        lines = page.split("\n")
        # Footer: the page's last non-blank line when it names the page.
        last = len(lines) - 1
        while last >= 0 and not lines[last].strip():
            last -= 1
        if last >= 0 and FOOTER_RE.search(lines[last]):
            lines = lines[:last]
        # Running header: the first block of non-blank lines of every page but the first, when its
        # first line carries the RFC number or the publication date.
        if number > 0:
            first = 0
            while first < len(lines) and not lines[first].strip():
                first += 1
            if first < len(lines) and HEADER_RE.search(lines[first]):
                end = first
                while end < len(lines) and lines[end].strip() and end - first < 4:
                    end += 1
                lines = lines[end:]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:
            continue
        # A paragraph that runs over the page break continues; one that ended there stays apart.
        if out and out[-1].rstrip().endswith((".", ":", ";")) or out and not lines[0].startswith(" "):
            out.append("")
        out.extend(lines)
    return out


def is_heading(line):
    return bool(line) and not line[0].isspace() and not TOC_RE.search(line)


def find_introduction(lines):
    """(index of the introduction heading, its section number or None), or None."""
    for i, line in enumerate(lines):
        if not is_heading(line):
            continue
        m = INTRO_RE.match(line.strip())
        if m and len(line.split()) <= 8:
            return i, m.group(1)
    return None


def section_lines(lines, mode):
    """The lines of the introduction (mode "introduction") or of the body (mode "body"), or None."""
    found = find_introduction(lines)
    if found is None:
        return None
    start, number = found
    end = len(lines)
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if not is_heading(line):
            continue
        if END_OF_BODY_RE.match(line.strip()):
            end = j
            break
        if mode == "body":
            continue
        numbered = NUMBERED_RE.match(line)
        if numbered and numbered.group(1) != number:
            end = j
            break
        if number is None and (numbered or APPENDIX_RE.match(line)):
            end = j
            break
    return lines[start + 1 : end]


def is_figure(paragraph):
    """ASCII art, tables and code: few letters among the non-space characters."""
    chars = [c for c in paragraph if not c.isspace()]
    if not chars:
        return True
    letters = sum(c.isalpha() for c in chars)
    return letters < 0.6 * len(chars) or "+--" in paragraph or "--+" in paragraph


def paragraphs_of(lines):
    """Blank-line separated paragraphs, each re-flowed to one line; figures dropped."""
    out, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line)
            continue
        if current:
            text = " ".join(" ".join(current).split())
            if not is_figure("\n".join(current)):
                out.append(text)
            current = []
    return out


def abstract_of(meta):
    raw = (meta.get("abstract") or "").replace("\r", "")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw)]
    return "\n".join(p for p in paragraphs if p)


# ------------------------------------------------------------------------------------------------
# Reading the RFC directory


def rfc_files(rfc_dir):
    """{number: (json path, text path or None)} for every RFC under rfc_dir."""
    folders = [os.path.join(rfc_dir, "links")]
    if not os.path.isdir(folders[0]):
        folders = [os.path.join(root) for root, _dirs, _files in os.walk(rfc_dir)]
    found = {}
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            m = re.match(r"^rfc(\d+)\.(json|txt\.gz|txt)$", name)
            if not m:
                continue
            number, kind = int(m.group(1)), m.group(2)
            entry = found.setdefault(number, {})
            entry.setdefault("json" if kind == "json" else "txt", os.path.join(folder, name))
    return {n: (e.get("json"), e.get("txt")) for n, e in found.items()}


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def rfc_number(name):
    m = RFC_NUMBER_RE.match(name.strip())
    return int(m.group(1)) if m else None


def collect_records(rfc_dir, mode, max_doc_words, removed):
    records = []
    for number, (json_path, txt_path) in sorted(rfc_files(rfc_dir).items()):
        if not json_path or not txt_path:
            removed["no metadata or text"] += 1
            continue
        with open(json_path, encoding="utf-8", errors="replace") as f:
            try:
                meta = json.load(f)
            except json.JSONDecodeError:
                meta = None
        if not isinstance(meta, dict):
            removed["no metadata or text"] += 1
            continue
        summary = abstract_of(meta)
        if not summary:
            removed["no abstract"] += 1
            continue
        try:
            text = read_text(txt_path)
        except (OSError, EOFError, zlib.error) as e:
            # A damaged rfcN.txt.gz (an interrupted unpack) ended the build in a traceback naming no file.
            removed["unreadable text"] += 1
            print("build_rfc_dataset: skipped %s: %s" % (txt_path, e), file=sys.stderr)
            continue
        body = section_lines(remove_page_breaks(text), mode)
        if body is None:
            removed["no introduction heading"] += 1
            continue
        paragraphs = paragraphs_of(body)
        if mode == "body":
            paragraphs = cut_words(paragraphs, max_doc_words)
        links = [rfc_number(x) for x in (meta.get("obsoletes") or []) + (meta.get("obsoleted_by") or [])]
        records.append(
            {
                "number": number,
                "document": "\n".join(paragraphs),
                "summary": summary,
                "links": sorted(n for n in links if n is not None),
            }
        )
    return records


def cut_words(paragraphs, limit):
    out, total = [], 0
    for p in paragraphs:
        words = p.split()
        if total + len(words) > limit:
            if limit - total > 0:
                out.append(" ".join(words[: limit - total]))
            break
        out.append(p)
        total += len(words)
    return out


# ------------------------------------------------------------------------------------------------
# Building


def length_filter(record, args):
    """The removal reason of a document or summary outside the word limits, or None."""
    for field, low, high in (
        ("document", args.min_doc_words, args.max_doc_words),
        ("summary", args.min_summary_words, args.max_summary_words),
    ):
        words = len(common.WORD_RE.findall(record[field]))
        if words < low:
            return "%s < %d words" % (field, low)
        if words > high:
            return "%s > %d words" % (field, high)
    return None


def build(records, args, removed):
    """Filtered, grouped and split examples plus group sizes."""
    kept = {}
    for r in records:
        reason = length_filter(r, args)
        if reason:
            removed[reason] += 1
            continue
        if common.contains_sequence(common.norm_tokens(r["document"]), common.norm_tokens(r["summary"])):
            removed["summary copied from the document"] += 1
            continue
        key = (r["document"], r["summary"])
        if key in kept:  # records come in RFC-number order: the smallest number stays
            removed["duplicate (document, summary)"] += 1
            continue
        kept[key] = r

    uf = common.UnionFind()
    numbers = {r["number"] for r in records}
    for r in kept.values():
        uf.find(r["number"])
        for other in r["links"]:
            if other in numbers:  # only RFCs we have text for can carry a group
                uf.union(r["number"], other)
    out = {name: [] for name in common.SPLITS}
    group_sizes = collections.Counter()
    for r in sorted(kept.values(), key=lambda r: "rfc%d" % r["number"]):
        group = "rfc%d" % uf.find(r["number"])  # the root is the smallest number in the group
        group_sizes[group] += 1
        out[common.split_of(group, args.split)].append(
            {"id": "rfc%d" % r["number"], "document": r["document"], "summary": r["summary"], "_group": group}
        )
    return out, group_sizes


class FetchError(Exception):
    """--fetch could not download or unpack the packages; the message says what to check."""


def run_fetch_step(label, command, hint, cwd=None):
    """Runs one step of --fetch; a failure raises FetchError naming the step and what to check."""
    try:
        subprocess.run(command, check=True, cwd=cwd)
    except FileNotFoundError:
        raise FetchError("%s is not installed (--fetch needs Debian's apt-get and dpkg-deb)" % command[0])
    except subprocess.CalledProcessError as e:
        raise FetchError("`%s` failed (exit %d, messages above): %s" % (label, e.returncode, hint))


def fetch(fetch_dir, mirror, suite):
    """Downloads and unpacks the doc-rfc packages into fetch_dir/root; returns the RFC directory."""
    fetch_dir = os.path.abspath(fetch_dir)
    lists = os.path.join(fetch_dir, "apt", "lists")
    cache = os.path.join(fetch_dir, "apt", "cache")
    debs = os.path.join(fetch_dir, "debs")
    for d in (os.path.join(lists, "partial"), os.path.join(cache, "archives", "partial"), debs):
        os.makedirs(d, exist_ok=True)
    sources = os.path.join(fetch_dir, "apt", "sources.list")
    with open(sources, "w", encoding="utf-8") as f:
        f.write("deb %s %s non-free\n" % (mirror, suite))
    apt = [
        "-o", "Dir::Etc::SourceList=" + sources,
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", "Dir::State::Lists=" + lists,
        "-o", "Dir::Cache=" + cache,
        "-o", "Acquire::Languages=none",
    ]  # fmt: skip
    # apt-get update only warns when the mirror cannot be reached (exit 0); download then fails with
    # "Unable to locate package", which reads as if the packages did not exist.
    hint = (
        "can %s be reached from here, and does its suite %s have a non-free component with the doc-rfc "
        "packages? Check --mirror and --suite, or pass --rfc-dir to RFCs unpacked elsewhere" % (mirror, suite)
    )
    run_fetch_step("apt-get update", ["apt-get"] + apt + ["update"], hint)
    run_fetch_step("apt-get download", ["apt-get"] + apt + ["download"] + list(RFC_PACKAGES), hint, cwd=debs)
    root = os.path.join(fetch_dir, "root")
    for name in sorted(os.listdir(debs)):
        if name.endswith(".deb"):
            run_fetch_step("dpkg-deb -x " + name, ["dpkg-deb", "-x", os.path.join(debs, name), root],
                           "a download cut short? Remove %s and run --fetch again" % os.path.join(debs, name))
    return os.path.join(root, "usr", "share", "doc", "RFC")


def os_codename():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VERSION_CODENAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "bookworm"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--rfc-dir", default="/usr/share/doc/RFC", help="RFC directory (default %(default)s)")
    p.add_argument("--fetch", metavar="DIR", help="download and unpack the doc-rfc packages into DIR first")
    p.add_argument("--mirror", default="http://deb.debian.org/debian", help="for --fetch (default %(default)s)")
    p.add_argument("--suite", default=os_codename(), help="for --fetch (default %(default)s)")
    p.add_argument("--document", choices=("introduction", "body"), default="introduction")
    p.add_argument("--min-doc-words", type=int, default=50)
    p.add_argument("--max-doc-words", type=int, default=2000)
    p.add_argument("--min-summary-words", type=int, default=10)
    p.add_argument("--max-summary-words", type=int, default=400)
    return common.parse_with_split(p, argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rfc_dir = fetch(args.fetch, args.mirror, args.suite) if args.fetch else args.rfc_dir
    except FetchError as e:
        print("build_rfc_dataset: --fetch: %s" % e, file=sys.stderr)
        return 2
    if not os.path.isdir(rfc_dir):
        print(
            "build_rfc_dataset: no RFC directory at %s; pass --fetch DIR to download Debian's doc-rfc "
            "packages (non-free) into DIR, or --rfc-dir to where they are unpacked" % rfc_dir,
            file=sys.stderr,
        )
        return 2
    if not rfc_files(rfc_dir):
        # Else every split came out empty with "loosen the filters", which no filter could change.
        print(
            "build_rfc_dataset: no RFCs (rfcN.json, rfcN.txt.gz) under %s; --rfc-dir takes the directory the "
            "doc-rfc packages install, /usr/share/doc/RFC (FETCH_DIR/root/usr/share/doc/RFC after --fetch)"
            % rfc_dir,
            file=sys.stderr,
        )
        return 2
    removed = collections.Counter()
    records = collect_records(rfc_dir, args.document, args.max_doc_words, removed)
    read = len(records) + sum(removed.values())  # every RFC found, whichever reason removed it while reading
    splits, group_sizes = build(records, args, removed)

    problem = common.empty_split_problem(splits, args.split, removed, read, "RFCs",
                                         "--min-doc-words, --max-doc-words, --document")
    if problem:
        print("build_rfc_dataset: " + problem, file=sys.stderr)
        return 1
    stats = {"input": rfc_dir, "document": args.document, "rfcs_read": read}
    header = "RFCs read: %d from %s (document: %s)" % (read, rfc_dir, args.document)
    common.write_outputs(args.out, splits, stats, removed, group_sizes, None if args.quiet else header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
