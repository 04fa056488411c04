#!/usr/bin/python3
"""tools/data/build_dataset.py on a fixture of Debian-format records written here: control-format
parsing (continuation lines, ' .' paragraph breaks, verbatim lines, Description-en/-md5, Source with a
version), grouping (Source field, shared first paragraphs), filters, deduplication, splits that never
cut a group, and byte-identical output across runs."""

import gzip
import importlib.util
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "data", "build_dataset.py")
spec = importlib.util.spec_from_file_location("build_dataset", SCRIPT)
bd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bd)

LOREM = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


def filler(i, n=24):
    """A distinct paragraph of n words for package i."""
    return " ".join("%s%d" % (LOREM[(i * 7 + k) % len(LOREM)], (i * 31 + k) % 97) for k in range(n))


SHARED = "Foo is a library for frobnicating widgets over the network with speed and style, used by many tools."

PACKAGES = """\
Package: libfoo1
Source: foo (1.2-3)
Version: 1.2-3
Description: widget frobnication library
Description-md5: 00000000000000000000000000000001
Tag: role::shared-lib,
 devel::library

Package: foo-utils
Source: foo
Description: command-line tools for foo
Description-md5: 00000000000000000000000000000002

Package: bar
Description: widget frobnication in another source
Description-md5: 00000000000000000000000000000003

Package: baz
Source: baz-src
Description: baz with its long description in the Packages list itself
 Baz keeps its long description here, the way some third-party archives do,
 so the builder must read it from the Packages file when no translation has it.
 .
 A second paragraph with enough words to pass the length filter easily.
Description-md5: 00000000000000000000000000000004
"""

TRANSLATION = """\
Package: libfoo1
Description-md5: 00000000000000000000000000000001
Description-en: widget frobnication library
 Foo frobnicates widgets. It is written in C and has bindings for several
 languages, all of which are documented in the foo-doc package together.
 .
 This package contains the shared library.

Package: foo-utils
Description-md5: 00000000000000000000000000000002
Description-en: command-line tools for foo
 The foo utilities give a shell interface to the foo library: they convert,
 inspect and repair widget files, and they can talk to remote frobnicators.
 .
 Features:
   * convert widgets
   * inspect widgets
 .
 This package contains the tools.

Package: bar
Description-md5: 00000000000000000000000000000003
Description-en: widget frobnication in another source
 %(shared)s
 .
 This is the bar flavour of it.

Package: qux
Description-md5: 00000000000000000000000000000005
Description-en: qux frobnication flavour
 %(shared)s
 .
 This is the qux flavour of it.

Package: dup-one
Description-md5: 00000000000000000000000000000006
Description-en: identical description twice
 This description is shared word for word by two different binary packages
 from two different sources, so the pair must be kept only once in the data.

Package: dup-two
Description-md5: 00000000000000000000000000000007
Description-en: identical description twice
 This description is shared word for word by two different binary packages
 from two different sources, so the pair must be kept only once in the data.

Package: short
Description-md5: 00000000000000000000000000000008
Description-en: too short to keep
 Only a few words here.

Package: copycat
Description-md5: 00000000000000000000000000000009
Description-en: Copycat is a tool that copies files
 Copycat is a tool that copies files. It does this with great care, checking
 every byte twice, and it reports progress on the terminal while it works hard.

Package: oneword
Description-md5: 00000000000000000000000000000010
Description-en: oneword
 This package has a synopsis of a single word, which the builder filters out
 because a one-word summary says almost nothing about the package at all here.

Package: nolong
Description-md5: 00000000000000000000000000000011
Description-en: a package without a long description
""" % {
    "shared": SHARED
}


def filler_records(count):
    packages, translation = [], []
    for i in range(count):
        src = "fsrc%d" % (i // 3)  # three binaries per source
        packages.append("Package: filler%d\nSource: %s\nDescription: filler %d synopsis\n" % (i, src, i))
        translation.append(
            "Package: filler%d\nDescription-md5: f%031d\nDescription-en: filler %d synopsis\n %s\n .\n %s\n"
            % (i, i, i, filler(i), filler(i + 1000, 5))
        )
    return "\n".join(packages), "\n".join(translation)


class BuildDatasetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="srformer-dataset-")
        d = cls.tmp.name
        fp, ft = filler_records(150)
        cls.packages = os.path.join(d, "main_binary-amd64_Packages")
        with open(cls.packages, "w") as f:
            f.write(PACKAGES + "\n" + fp)
        # The translations go in compressed, as apt may store them.
        cls.translation = os.path.join(d, "main_i18n_Translation-en.gz")
        with gzip.open(cls.translation, "wt") as f:
            f.write(TRANSLATION + "\n" + ft)
        cls.out = [os.path.join(d, "out%d" % i) for i in range(2)]
        for out in cls.out:
            rc = bd.main(["--out", out, "--packages", cls.packages, "--translation", cls.translation, "--quiet"])
            assert rc == 0
        cls.rows = {}
        for split in bd.SPLITS:
            with open(os.path.join(cls.out[0], split + ".jsonl"), encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    assert row["id"] not in cls.rows
                    cls.rows[row["id"]] = dict(row, split=split)
        with open(os.path.join(cls.out[0], "stats.json")) as f:
            cls.stats = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_parse_control_continuations_and_blank_separators(self):
        recs = bd.parse_control("A: 1\nB: two\n more\n .\n  verbatim\n\n \t\nA: 3\r\n# comment\nC:x\n")
        self.assertEqual(recs, [{"A": "1", "B": "two\n more\n .\n  verbatim"}, {"A": "3", "C": "x"}])

    def test_split_description_paragraphs_and_verbatim_lines(self):
        syn, paras = bd.split_description(
            "  The  synopsis \n wrapped line one\n line  two\n .\n   * item one\n   * item two\n .\n .\n last\n .reserved"
        )
        self.assertEqual(syn, "The synopsis")
        self.assertEqual(paras, [["wrapped line one line two"], ["* item one", "* item two"], ["last"]])

    def test_source_name_strips_version(self):
        self.assertEqual(bd.source_name("foo (1.2-3)"), "foo")
        self.assertEqual(bd.source_name("foo"), "foo")

    def test_documents_and_summaries(self):
        r = self.rows["foo-utils"]
        self.assertEqual(r["summary"], "command-line tools for foo")
        self.assertEqual(
            r["document"],
            "The foo utilities give a shell interface to the foo library: they convert, inspect and repair "
            "widget files, and they can talk to remote frobnicators.\nFeatures:\n* convert widgets\n"
            "* inspect widgets\nThis package contains the tools.",
        )
        # A long description found in the Packages list itself is used.
        self.assertIn("baz", self.rows)
        self.assertTrue(self.rows["baz"]["document"].startswith("Baz keeps its long description here"))

    def test_filters_and_deduplication(self):
        for gone in ("short", "copycat", "oneword", "nolong"):
            self.assertNotIn(gone, self.rows)
        self.assertIn("dup-one", self.rows)
        self.assertNotIn("dup-two", self.rows)
        removed = self.stats["removed"]
        self.assertEqual(removed["duplicate (document, summary)"], 1)
        self.assertEqual(removed["document < 20 words"], 1)
        self.assertEqual(removed["summary copied from the first sentence"], 1)
        self.assertEqual(removed["summary < 2 words"], 1)
        self.assertEqual(removed["no long description"], 1)

    def test_grouping_source_field_and_shared_first_paragraph(self):
        # libfoo1 and foo-utils: Source foo (one with a version); bar and qux: same first paragraph,
        # different sources; so these two groups, and each lands in one split.
        self.assertEqual(self.rows["libfoo1"]["split"], self.rows["foo-utils"]["split"])
        self.assertEqual(self.rows["bar"]["split"], self.rows["qux"]["split"])
        records = bd.collect_records([self.translation], [self.packages])
        args = bd.parse_args(["--out", "unused"])
        splits, _, groups = bd.build(records, args)
        group_of = {e["id"]: e["_group"] for rows in splits.values() for e in rows}
        self.assertEqual(group_of["libfoo1"], "foo")
        self.assertEqual(group_of["foo-utils"], "foo")
        self.assertEqual(group_of["bar"], "bar")  # smallest source name of {bar, qux}
        self.assertEqual(group_of["qux"], "bar")
        self.assertEqual(group_of["filler4"], "fsrc1")
        self.assertEqual(groups["fsrc1"], 3)

    def test_groups_never_straddle_splits(self):
        records = bd.collect_records([self.translation], [self.packages])
        splits, _, _ = bd.build(records, bd.parse_args(["--out", "unused"]))
        split_of_group = {}
        for name, rows in splits.items():
            for e in rows:
                self.assertEqual(split_of_group.setdefault(e["_group"], name), name, e["id"])
                self.assertEqual(name, bd.split_of(e["_group"], [90, 5, 5]))
        # With ~60 groups every split is used (the fixture is large enough for 90/5/5 buckets to
        # differ; the split of a group depends only on its name).
        self.assertGreater(len(splits["train"]), len(splits["validation"]))
        self.assertEqual(sum(len(r) for r in splits.values()), len(self.rows))

    def test_split_rule_is_stable(self):
        self.assertEqual(bd.split_of("foo", [100, 0, 0]), "train")
        self.assertEqual(bd.split_of("foo", [0, 0, 100]), "test")
        self.assertEqual(bd.split_of("foo", [90, 5, 5]), bd.split_of("foo", [90, 5, 5]))

    def test_deterministic_output(self):
        for name in list(bd.SPLITS) + ["stats"]:
            ext = ".json" if name == "stats" else ".jsonl"
            with open(os.path.join(self.out[0], name + ext), "rb") as a, open(
                os.path.join(self.out[1], name + ext), "rb"
            ) as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_input_order_does_not_change_output(self):
        records = bd.collect_records([self.translation], [self.packages])
        args = bd.parse_args(["--out", "unused"])
        a, _, _ = bd.build(records, args)
        b, _, _ = bd.build(list(reversed(records)), args)
        strip = lambda s: {k: [(e["id"], e["document"], e["summary"]) for e in v] for k, v in s.items()}
        self.assertEqual(strip(a), strip(b))

    def test_stats_are_reported(self):
        s = self.stats["splits"]["train"]
        self.assertEqual(s["examples"], sum(1 for r in self.rows.values() if r["split"] == "train"))
        self.assertGreater(s["document_words"]["mean"], 20)
        self.assertGreaterEqual(s["document_words"]["p95"], s["document_words"]["median"])

    def run_main(self, extra):
        """bd.main on the fixture lists with `extra` arguments into a fresh directory: (rc or SystemExit
        code, stderr, whether the output directory was written)."""
        import contextlib
        import io

        err = io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o")
            with contextlib.redirect_stderr(err):
                try:
                    lists = ["--packages", self.packages, "--translation", self.translation]
                    rc = bd.main(["--out", out, "--quiet"] + lists + extra)
                except SystemExit as e:
                    rc = e.code
            return rc, err.getvalue(), os.path.exists(out)

    def test_a_minimum_over_its_maximum_is_refused(self):
        # It removed every record and wrote three empty splits with exit 0.
        rc, err, written = self.run_main(["--min-doc-words", "500", "--max-doc-words", "10"])
        self.assertEqual(rc, 2)
        self.assertIn("--min-doc-words 500 is more than --max-doc-words 10", err)
        self.assertFalse(written)

    def test_an_empty_split_is_an_error(self):
        rc, err, written = self.run_main(["--min-summary-words", "1000"])
        self.assertEqual(rc, 1)
        self.assertIn("the train, validation and test splits would be empty: 0 of", err)
        self.assertIn("summary < 1000 words", err)
        self.assertFalse(written)
        # A split given no share is empty on purpose.
        rc, err, written = self.run_main(["--split", "100,0,0"])
        self.assertEqual(rc, 0, err)
        self.assertTrue(written)

    def test_a_malformed_split_is_refused(self):
        # "90,5,x" ended in a ValueError traceback; "nan,nan,nan" passed (every comparison with nan is
        # false) and put every group in test.
        for split in ("90,5,x", "nan,nan,nan", "90,5", "inf,-inf,100"):
            rc, err, written = self.run_main(["--split", split])
            self.assertEqual(rc, 2, split)
            self.assertIn("--split needs three non-negative percentages summing to 100", err)
            self.assertIn("got '%s'" % split, err)
            self.assertFalse(written, split)

    def test_an_unreadable_list_is_named(self):
        # A missing, directory or damaged list ended in a traceback (FileNotFoundError, BadGzipFile, ...).
        import contextlib
        import io

        with tempfile.TemporaryDirectory() as d:
            damaged = os.path.join(d, "main_i18n_Translation-en.gz")
            with open(self.translation, "rb") as f:
                data = f.read()
            with open(damaged, "wb") as f:
                f.write(data[: len(data) // 2])  # an interrupted download
            not_gzip = os.path.join(d, "plain.gz")
            with open(not_gzip, "w") as f:
                f.write("Package: x\n")
            cases = [
                (os.path.join(d, "missing"), "No such file or directory"),
                (d, "Is a directory"),
                (damaged, ""),
                (not_gzip, "Not a gzipped file"),
            ]
            for path, why in cases:
                err = io.StringIO()
                out = os.path.join(d, "o")
                with contextlib.redirect_stderr(err):
                    rc = bd.main(["--out", out, "--packages", self.packages, "--translation", path, "--quiet"])
                self.assertEqual(rc, 2, path)
                self.assertIn("build_dataset: cannot read %s: %s" % (path, why), err.getvalue())
                self.assertIn("check --translation / --packages", err.getvalue())
                self.assertFalse(os.path.exists(out))

    def test_an_interrupted_build_leaves_the_earlier_one(self):
        # The splits were written in place: an interrupted run (Ctrl-C, a full disk) left a train.jsonl
        # cut after some line, which reads as a smaller dataset, beside the earlier run's stats.json.
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o")
            lists = ["--packages", self.packages, "--translation", self.translation, "--quiet"]
            self.assertEqual(bd.main(["--out", out] + lists), 0)
            names = sorted(os.listdir(out))
            before = {}
            for name in names:
                with open(os.path.join(out, name), "rb") as f:
                    before[name] = f.read()
            real_dumps, calls = bd.json.dumps, [0]

            def failing_dumps(*args, **kwargs):
                calls[0] += 1
                if calls[0] > 5:
                    raise KeyboardInterrupt
                return real_dumps(*args, **kwargs)

            bd.json.dumps = failing_dumps
            try:
                with self.assertRaises(KeyboardInterrupt):
                    bd.main(["--out", out, "--min-doc-words", "21"] + lists)
            finally:
                bd.json.dumps = real_dumps
            self.assertGreater(calls[0], 5)
            self.assertEqual(sorted(os.listdir(out)), names)  # no temporary files left
            for name in names:
                with open(os.path.join(out, name), "rb") as f:
                    self.assertEqual(f.read(), before[name], name)

    def test_an_out_that_is_a_file_is_refused(self):
        # It ended in a FileExistsError traceback.
        with tempfile.NamedTemporaryFile() as f:
            import contextlib
            import io

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                with self.assertRaises(SystemExit) as e:
                    bd.main(["--out", f.name, "--packages", self.packages, "--translation", self.translation])
            self.assertEqual(e.exception.code, 2)
            self.assertIn("--out %s is a file; give a directory" % f.name, err.getvalue())

    def test_missing_lists_give_a_clear_error(self):
        with tempfile.TemporaryDirectory() as empty:
            rc = bd.main(["--out", os.path.join(empty, "o"), "--lists-dir", empty, "--quiet"])
        self.assertEqual(rc, 2)


if __name__ == "__main__":
    sys.exit(unittest.main())
