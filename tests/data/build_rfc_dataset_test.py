#!/usr/bin/python3
"""tools/data/build_rfc_dataset.py on fixture RFCs written here in the formats the doc-rfc packages
ship (modern: running header "RFC N ... Month Year", footer "[Page N]", indented table of contents;
old: dated header block): introduction extraction (table of contents skipped, subsections kept, the
next section, references and figures left out, paragraphs re-flowed across page breaks), the body mode,
filters, grouping over obsoletes links, splits that never cut a group, and byte-identical output."""

import gzip
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "data", "build_rfc_dataset.py")
spec = importlib.util.spec_from_file_location("build_rfc_dataset", SCRIPT)
rfc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rfc)

WORDS = (
    "packet router header option carrier message session stream window token client server "
    "transport address segment buffer timer channel payload frame"
).split()


def prose(seed, n):
    """n distinct words of text for fixture seed (no sentence copies between documents)."""
    return " ".join("%s%d" % (WORDS[(seed * 5 + k) % len(WORDS)], (seed * 13 + k) % 89) for k in range(n))


def wrap(text, indent="   ", width=66):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(indent + line)
            line = word
        else:
            line = (line + " " + word).strip()
    if line:
        lines.append(indent + line)
    return lines


def page_break(number, rfc_number):
    return [
        "",
        "Author                       Standards Track                    [Page %d]" % number,
        "\f",
        "RFC %d                      Fixture                     May 2020" % rfc_number,
        "",
    ]


def modern_rfc(number, seed, intro_words=120):
    lines = [
        "Internet Engineering Task Force (IETF)                         Author",
        "Request for Comments: %d                                     May 2020" % number,
        "",
        "                          Fixture Protocol",
        "",
        "Abstract",
        "",
    ]
    lines += wrap("This abstract appears in the text as well as in the metadata.")
    lines += ["", "Table of Contents", "", "   1.  Introduction ....................... 2"]
    lines += ["   2.  Protocol ........................... 3", "   3.  References ......................... 4"]
    lines += page_break(1, number)
    lines += ["1.  Introduction", ""]
    half = intro_words // 2
    # The first paragraph runs over a page break: it must come out as one paragraph.
    first = wrap(prose(seed, half))
    lines += first[:2] + page_break(2, number) + first[2:] + [""]
    lines += ["1.1.  Terminology", ""] + wrap(prose(seed + 1, intro_words - half)) + [""]
    lines += ["   +--------+     +--------+", "   | client |---->| server |", "   +--------+     +--------+", ""]
    lines += ["2.  Protocol", ""] + wrap("PROTOCOLTEXT " + prose(seed + 2, 40)) + [""]
    lines += ["3.  References", ""] + wrap("REFERENCETEXT [RFC1] Someone, Something.") + [""]
    lines += page_break(3, number)
    return "\n".join(lines) + "\n"


def old_rfc(number, seed):
    lines = ["", "RFC:  %d" % number, "", "                        OLD PROTOCOL", "", "1.  INTRODUCTION", ""]
    lines += wrap(prose(seed, 40) + ".", indent="  ")  # a paragraph that ends at the page break
    lines += ["", "", "                                                                [Page 1]", "\f", ""]
    lines += ["                                                          September 1981", "Old Protocol", "Introduction", ""]
    lines += wrap(prose(seed + 3, 40), indent="  ") + [""]
    lines += ["2.  OVERVIEW", ""] + wrap("OVERVIEWTEXT " + prose(seed + 4, 30), indent="  ") + [""]
    return "\n".join(lines) + "\n"


class Fixture:
    """An RFC directory in the packages' layout: links/rfcN.json and links/rfcN.txt.gz."""

    def __init__(self, root):
        self.links = os.path.join(root, "links")
        os.makedirs(self.links)

    def add(self, number, text, abstract, obsoletes=(), obsoleted_by=()):
        meta = {
            "doc_id": "RFC%04d" % number,
            "title": "Fixture %d" % number,
            "abstract": abstract.replace("\n", "\r\n"),
            "obsoletes": ["RFC%04d" % n for n in obsoletes],
            "obsoleted_by": ["RFC%04d" % n for n in obsoleted_by],
        }
        with open(os.path.join(self.links, "rfc%d.json" % number), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        if text is not None:
            with gzip.open(os.path.join(self.links, "rfc%d.txt.gz" % number), "wb") as f:
                f.write(text.encode("utf-8"))


def abstract(seed):
    return "Abstract words for fixture %d: %s.\n\nA second paragraph %s." % (seed, prose(seed + 50, 12), prose(seed + 60, 6))


class BuildRfcDatasetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "RFC")
        fx = Fixture(self.dir)
        fx.add(8000, modern_rfc(8000, 1), abstract(1))
        fx.add(791, old_rfc(791, 2), abstract(2))
        # A family linked by obsoletes: 8100 obsoletes 8101's predecessor 8102 ... in both directions.
        fx.add(8100, modern_rfc(8100, 10), abstract(10), obsoletes=[8102])
        fx.add(8102, modern_rfc(8102, 20), abstract(20), obsoleted_by=[8100, 8103])
        fx.add(8103, modern_rfc(8103, 30), abstract(30), obsoletes=[8102])
        fx.add(8200, modern_rfc(8200, 40), "")  # no abstract
        fx.add(8201, "1.  Scope\n\n" + "\n".join(wrap(prose(41, 80))) + "\n", abstract(41))  # no introduction
        fx.add(8202, modern_rfc(8202, 42, intro_words=20), abstract(42))  # too short
        fx.add(8203, None, abstract(43))  # metadata without text
        copied = modern_rfc(8204, 44).replace(prose(44, 60)[:30], "Abstract words copied here " + prose(44, 60)[:30])
        fx.add(8204, copied, "Abstract words copied here")  # below the summary minimum: counted first
        fx.add(8205, modern_rfc(8205, 45), prose(45, 12))  # the abstract is the document's first words
        fx.add(8206, modern_rfc(8000, 1), abstract(1))  # the same pair as 8000
        for n in range(8300, 8340):
            fx.add(n, modern_rfc(n, n), abstract(n))

    def tearDown(self):
        self.tmp.cleanup()

    def run_builder(self, out, *extra):
        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = rfc.main(["--rfc-dir", self.dir, "--out", out] + list(extra))
        self.assertEqual(rc, 0)
        rows = {}
        for split in ("train", "validation", "test"):
            with open(os.path.join(out, split + ".jsonl"), encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    row["split"] = split
                    rows[row["id"]] = row
        with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
            stats = json.load(f)
        return rows, stats, buf.getvalue()

    def test_modern_introduction(self):
        rows, _, _ = self.run_builder(os.path.join(self.tmp.name, "out"))
        doc = rows["rfc8000"]["document"].split("\n")
        # The paragraph that ran over the page break is whole, the subsection is kept with its heading.
        self.assertEqual(doc[0], prose(1, 60))
        self.assertEqual(doc[1], "1.1. Terminology")
        self.assertEqual(doc[2], prose(2, 60))
        self.assertEqual(len(doc), 3, "the figure, the next section and the references stay out")
        text = rows["rfc8000"]["document"]
        for absent in ("PROTOCOLTEXT", "REFERENCETEXT", "[Page", "RFC 8000", "....", "client |"):
            self.assertNotIn(absent, text)
        self.assertEqual(rows["rfc8000"]["summary"].split("\n")[0], abstract(1).split("\n")[0])
        self.assertEqual(len(rows["rfc8000"]["summary"].split("\n")), 2)

    def test_old_format_introduction(self):
        rows, _, _ = self.run_builder(os.path.join(self.tmp.name, "out"))
        doc = rows["rfc791"]["document"]
        self.assertEqual(doc.split("\n"), [prose(2, 40) + ".", prose(5, 40)])
        self.assertNotIn("September 1981", doc)
        self.assertNotIn("OVERVIEWTEXT", doc)

    def test_body_mode_runs_to_the_references_and_cuts_words(self):
        rows, _, _ = self.run_builder(os.path.join(self.tmp.name, "body"), "--document", "body")
        text = rows["rfc8000"]["document"]
        self.assertIn("PROTOCOLTEXT", text)
        self.assertNotIn("REFERENCETEXT", text)
        rows, _, _ = self.run_builder(
            os.path.join(self.tmp.name, "cut"), "--document", "body", "--max-doc-words", "70"
        )
        self.assertEqual(len(rows["rfc8000"]["document"].split()), 70)

    def test_filters(self):
        rows, stats, printed = self.run_builder(os.path.join(self.tmp.name, "out"))
        removed = stats["removed"]
        self.assertEqual(removed["no abstract"], 1)
        self.assertEqual(removed["no introduction heading"], 1)
        self.assertEqual(removed["document < 50 words"], 1)  # 8202
        self.assertEqual(removed["no metadata or text"], 1)
        self.assertEqual(removed["summary < 10 words"], 1)
        self.assertEqual(removed["summary copied from the document"], 1)
        self.assertEqual(removed["duplicate (document, summary)"], 1)
        for gone in ("rfc8200", "rfc8201", "rfc8202", "rfc8203", "rfc8204", "rfc8205", "rfc8206"):
            self.assertNotIn(gone, rows)
        self.assertIn("rfc8000", rows)
        self.assertIn("rfc791", rows)
        self.assertIn("removed, no abstract: 1", printed)

    def test_a_minimum_of_zero_words_is_refused(self):
        # --min-doc-words 0 let an introduction without prose (a heading, then the next section) through
        # as an empty document, which srformer train and eval refuse.
        out = os.path.join(self.tmp.name, "zero")
        for flag, what in (("--min-doc-words", "document"), ("--min-summary-words", "summary")):
            with self.assertRaises(SystemExit) as e:
                self.main_stderr(["--rfc-dir", self.dir, "--out", out, flag, "0"])
            self.assertEqual(e.exception.code, 2)
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            with self.assertRaises(SystemExit):
                rfc.main(["--rfc-dir", self.dir, "--out", out, "--min-doc-words", "0"])
        finally:
            sys.stderr = old
        self.assertIn("--min-doc-words needs at least 1: srformer train and eval refuse an empty document", err.getvalue())
        self.assertFalse(os.path.exists(out))

    def test_a_damaged_text_is_counted_and_named(self):
        # A truncated rfcN.txt.gz (an interrupted unpack) ended the build in a traceback naming no file.
        damaged = os.path.join(self.dir, "links", "rfc8300.txt.gz")
        with open(damaged, "rb") as f:
            data = f.read()
        with open(damaged, "wb") as f:
            f.write(data[: len(data) // 2])
        out = os.path.join(self.tmp.name, "out")
        rc, err = self.main_stderr(["--rfc-dir", self.dir, "--out", out])
        self.assertEqual(rc, 0, err)
        self.assertIn("build_rfc_dataset: skipped %s: " % damaged, err)
        with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
            stats = json.load(f)
        self.assertEqual(stats["removed"]["unreadable text"], 1)
        # Read, and counted among the RFCs read, as every removed one is.
        self.assertEqual(stats["rfcs_read"], len(rfc.rfc_files(self.dir)))

    def test_obsoletes_links_keep_a_family_in_one_split(self):
        rows, stats, _ = self.run_builder(os.path.join(self.tmp.name, "out"))
        family = {rows["rfc%d" % n]["split"] for n in (8100, 8102, 8103)}
        self.assertEqual(len(family), 1)
        self.assertEqual(rows["rfc8100"]["split"], rfc.common.split_of("rfc8100", [90, 5, 5]))
        # 40 independent RFCs land in more than one split (the rule is a hash, not a constant).
        self.assertGreater(len({rows["rfc%d" % n]["split"] for n in range(8300, 8340)}), 1)
        self.assertEqual(stats["groups"], len(rows) - 2)

    def test_output_is_deterministic(self):
        a, b = os.path.join(self.tmp.name, "a"), os.path.join(self.tmp.name, "b")
        self.run_builder(a)
        self.run_builder(b)
        for name in ("train.jsonl", "validation.jsonl", "test.jsonl", "stats.json"):
            with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
                if name == "stats.json":
                    self.assertEqual(json.load(fa)["splits"], json.load(fb)["splits"])
                else:
                    self.assertEqual(fa.read(), fb.read(), name)

    def test_an_empty_split_is_an_error(self):
        # Filters that keep nothing wrote three empty splits with exit 0 (srformer eval: "has no examples").
        out = os.path.join(self.tmp.name, "empty")
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            with redirect_stdout(io.StringIO()):
                rc = rfc.main(["--rfc-dir", self.dir, "--out", out, "--min-doc-words", "1900"])
        finally:
            sys.stderr = old
        self.assertEqual(rc, 1)
        self.assertIn("build_rfc_dataset: the train, validation and test splits would be empty: 0 of", err.getvalue())
        self.assertIn("document < 1900 words", err.getvalue())
        self.assertFalse(os.path.exists(os.path.join(out, "train.jsonl")))

    def test_missing_directory_is_a_clear_error(self):
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            rc = rfc.main(["--rfc-dir", os.path.join(self.tmp.name, "none"), "--out", os.path.join(self.tmp.name, "o")])
        finally:
            sys.stderr = old
        self.assertEqual(rc, 2)
        self.assertIn("--fetch", err.getvalue())

    def main_stderr(self, argv):
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            with redirect_stdout(io.StringIO()):
                rc = rfc.main(argv)
        finally:
            sys.stderr = old
        return rc, err.getvalue()

    def test_a_directory_without_rfcs_is_a_clear_error(self):
        # A wrong --rfc-dir (say the --fetch directory's parent) said the splits would be empty and to
        # loosen the filters, which no filter could change.
        empty = os.path.join(self.tmp.name, "no-rfcs")
        os.makedirs(os.path.join(empty, "sub"))
        with open(os.path.join(empty, "sub", "README"), "w", encoding="utf-8") as f:
            f.write("not an RFC\n")
        out = os.path.join(self.tmp.name, "o")
        rc, err = self.main_stderr(["--rfc-dir", empty, "--out", out])
        self.assertEqual(rc, 2)
        self.assertIn("no RFCs (rfcN.json, rfcN.txt.gz) under " + empty, err)
        self.assertNotIn("loosen the filters", err)
        self.assertFalse(os.path.exists(out))

    def test_a_failed_fetch_is_a_clear_error(self):
        # Unreachable mirror: apt-get update only warned (exit 0), apt-get download failed with "Unable
        # to locate package", and the builder ended in a CalledProcessError traceback.
        bin_dir = os.path.join(self.tmp.name, "bin")
        os.makedirs(bin_dir)
        calls = os.path.join(self.tmp.name, "calls")
        with open(os.path.join(bin_dir, "apt-get"), "w", encoding="utf-8") as f:
            f.write('#!/bin/sh\nfor a; do last=$a; done\necho "$last" >> %s\n' % calls)
            f.write('case "$*" in *" download "*)\n')
            f.write('  echo "E: Unable to locate package $last" >&2; exit 100;;\nesac\n')
        os.chmod(os.path.join(bin_dir, "apt-get"), 0o755)
        old_path = os.environ["PATH"]
        os.environ["PATH"] = bin_dir + os.pathsep + old_path
        try:
            fetch_dir = os.path.join(self.tmp.name, "fetch")
            rc, err = self.main_stderr(
                ["--fetch", fetch_dir, "--mirror", "http://mirror.invalid/debian", "--suite", "bookworm",
                 "--out", os.path.join(self.tmp.name, "o")]
            )  # fmt: skip
        finally:
            os.environ["PATH"] = old_path
        self.assertEqual(rc, 2)
        self.assertIn("build_rfc_dataset: --fetch: `apt-get download` failed (exit 100", err)
        self.assertIn("can http://mirror.invalid/debian be reached", err)
        self.assertIn("--rfc-dir", err)
        with open(calls, encoding="utf-8") as f:
            self.assertEqual(f.read().split(), ["update", rfc.RFC_PACKAGES[-1]])
        # Without apt-get at all (not Debian): said so, not a FileNotFoundError traceback.
        os.environ["PATH"] = os.path.join(self.tmp.name, "empty-path")
        try:
            rc, err = self.main_stderr(["--fetch", fetch_dir, "--out", os.path.join(self.tmp.name, "o")])
        finally:
            os.environ["PATH"] = old_path
        self.assertEqual(rc, 2)
        self.assertIn("apt-get is not installed", err)


if __name__ == "__main__":
    unittest.main()
