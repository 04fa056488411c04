#!/usr/bin/python3
"""Builds a summarization dataset from Debian package descriptions: long description -> synopsis.

Python 3 standard library only. Run with the system interpreter:

    apt-get -o Acquire::Languages=en update          # once, as root: fetches the *_Translation-en lists
    /usr/bin/python3 tools/data/build_dataset.py --out data/debian

Input: the apt lists under /var/lib/apt/lists (or files given with --translation / --packages):
  * *_i18n_Translation-en*: records with Package, Description-md5 and Description-en (the full
    description: a one-line synopsis, then the long description as continuation lines);
  * *_Packages*: records with Package, Source (the source package, "name" or "name (version)"; absent
    when equal to the package name) and Description (in Debian's own lists only the synopsis; lists
    that carry the long description there are used as description records too).
Lists may be plain or compressed (.gz, .xz, .bz2 with the standard library; .lz4 and .zst, as
Debian's apt stores them, through apt-helper cat-file or lz4cat / zstdcat).

Output: OUT/{train,validation,test}.jsonl, one {"id", "document", "summary"} object per line, sorted
by id, and OUT/stats.json with the counts and length statistics that are also printed.

Document text: the long description's paragraphs (Debian Policy 5.6.13: a line " ." separates
paragraphs; lines starting with one space are word-wrapped text, joined with single spaces; lines
starting with two or more spaces are verbatim and keep their own line), paragraphs joined by "\\n".
Summary: the synopsis.

Filters, in this order (each removed record is counted under its reason):
  1. no long description;
  2. document shorter than --min-doc-words (20) or longer than --max-doc-words (400) words;
  3. summary shorter than --min-summary-words (2) words;
  4. summary copied from the document: its lower-cased alphanumeric token sequence occurs in that of
     the document's first sentence;
  5. duplicate (document, summary) pair: only the record with the smallest id is kept.

Split: records are grouped by source package; groups that share the first paragraph of their long
description (lower-cased, whitespace-collapsed, at least --min-shared-words words) are merged
(union-find). A merged group's representative is its smallest source-package name; the group goes to
train / validation / test by sha256(representative) mod 10000 against the --split percentages
(default 90/5/5), so near-duplicates never straddle splits and the assignment of a group does not
depend on the rest of the archive.
"""

import argparse
import bz2
import collections
import gzip
import hashlib
import json
import lzma
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import zlib

SPLITS = ("train", "validation", "test")
WORD_RE = re.compile(r"\S+")
TOKEN_RE = re.compile(r"[a-z0-9]+")
SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s")


# ------------------------------------------------------------------------------------------------
# Reading apt lists


class ListError(Exception):
    """An input list that cannot be read or decompressed; the message names it and says why."""


def read_list(path):
    """The text of a (possibly compressed) apt list; ListError when it cannot be read."""
    try:
        return read_list_text(path)
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as e:
        # (gzip's BadGzipFile is an OSError; a truncated .gz or .bz2 ends in EOFError.)
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise ListError("cannot read %s: %s" % (path, why)) from e


def read_list_text(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = f.read()
    elif path.endswith(".xz") or path.endswith(".lzma"):
        with lzma.open(path, "rb") as f:
            data = f.read()
    elif path.endswith(".bz2"):
        with bz2.open(path, "rb") as f:
            data = f.read()
    elif path.endswith(".lz4") or path.endswith(".zst"):
        data = None
        tools = [["/usr/lib/apt/apt-helper", "cat-file", path]]
        tools.append(["lz4cat", path] if path.endswith(".lz4") else ["zstdcat", path])
        for cmd in tools:
            if os.path.exists(cmd[0]) or shutil.which(cmd[0]):
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
                if proc.returncode == 0:
                    data = proc.stdout
                    break
        if data is None:
            raise ValueError("cannot decompress it (needs apt-helper, lz4cat or zstdcat)")
    else:
        with open(path, "rb") as f:
            data = f.read()
    return data.decode("utf-8", errors="replace")


def parse_control(text):
    """Debian control-format (deb822) records: a list of dicts field -> raw value.

    Records are separated by empty (or whitespace-only) lines. A line starting with a space or a tab
    continues the previous field; the value keeps continuation lines after a '\\n', with their
    leading whitespace. Field names are kept as written (the lists use one spelling each).
    """
    records = []
    fields = {}
    last = None
    for line in text.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            if fields:
                records.append(fields)
            fields = {}
            last = None
            continue
        if line[0] in " \t":
            if last is not None:
                fields[last] += "\n" + line
            continue
        if line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue  # malformed line: ignored
        last = name.strip()
        fields[last] = value.strip()
    if fields:
        records.append(fields)
    return records


def split_description(value):
    """(synopsis, [paragraphs]) of a Description field value (Debian Policy 5.6.13).

    Each paragraph is a list of lines: word-wrapped lines are joined into one line, verbatim lines
    (two or more leading spaces) stay separate. Whitespace inside a line is collapsed.
    """
    lines = value.split("\n")
    synopsis = " ".join(lines[0].split())
    paragraphs = []
    current = []  # lines of the current paragraph
    wrapped = []  # words of the word-wrapped text being joined

    def flush_wrapped():
        if wrapped:
            current.append(" ".join(wrapped))
            wrapped.clear()

    for raw in lines[1:]:
        body = raw[1:] if raw[:1] in (" ", "\t") else raw
        if body.strip() == ".":
            flush_wrapped()
            if current:
                paragraphs.append(list(current))
            current.clear()
            continue
        if body.startswith(".") and body.strip() != ".":
            continue  # " .xyz" lines are reserved by policy: ignored
        if body[:1] in (" ", "\t"):
            flush_wrapped()
            text = " ".join(body.split())
            if text:
                current.append(text)
        else:
            wrapped.extend(body.split())
    flush_wrapped()
    if current:
        paragraphs.append(current)
    return synopsis, paragraphs


def source_name(value):
    """'foo (1.2-3)' -> 'foo'."""
    return value.split("(")[0].strip()


# ------------------------------------------------------------------------------------------------
# Building


def norm_tokens(text):
    return TOKEN_RE.findall(text.lower())


def contains_sequence(haystack, needle):
    if not needle:
        return True
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def first_sentence(document):
    first_line = document.split("\n", 1)[0]
    return SENTENCE_END_RE.split(first_line, 1)[0]


class UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller name becomes the root: the representative is independent of input order.
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra


def split_of(representative, percentages):
    bucket = int.from_bytes(hashlib.sha256(representative.encode("utf-8")).digest()[:8], "big") % 10000
    bounds = [sum(percentages[: i + 1]) * 100 for i in range(len(percentages))]
    for name, bound in zip(SPLITS, bounds):
        if bucket < bound:
            return name
    return SPLITS[-1]


def collect_records(translation_files, packages_files):
    """Description records {package, synopsis, paragraphs, source} from the lists."""
    sources = {}
    descriptions = []  # (package, description value)
    for path in packages_files:
        for rec in parse_control(read_list(path)):
            pkg = rec.get("Package")
            if not pkg:
                continue
            if "Source" in rec:
                sources.setdefault(pkg, source_name(rec["Source"]))
            desc = rec.get("Description") or rec.get("Description-en")
            if desc and "\n" in desc:  # a list that carries long descriptions itself
                descriptions.append((pkg, desc))
    for path in translation_files:
        for rec in parse_control(read_list(path)):
            pkg = rec.get("Package")
            desc = rec.get("Description-en") or rec.get("Description")
            if pkg and desc:
                descriptions.append((pkg, desc))
    records = []
    for pkg, desc in descriptions:
        synopsis, paragraphs = split_description(desc)
        records.append(
            {
                "package": pkg,
                "source": sources.get(pkg, pkg),
                "synopsis": synopsis,
                "paragraphs": paragraphs,
            }
        )
    return records


def build(records, args):
    """Filtered, grouped and split examples plus statistics."""
    removed = collections.Counter()
    kept = {}  # (document, summary) -> example (smallest id wins)
    seen_ids = collections.Counter()
    candidates = []
    # The same package can appear in several lists (main, -updates, -security) with the same text:
    # exact repeats are dropped first so they do not count as duplicates below.
    unique = {}
    for r in records:
        key = (r["package"], r["synopsis"], tuple(tuple(p) for p in r["paragraphs"]))
        unique.setdefault(key, r)
    for key in sorted(unique):
        r = unique[key]
        if not r["paragraphs"]:
            removed["no long description"] += 1
            continue
        document = "\n".join("\n".join(p) for p in r["paragraphs"])
        summary = r["synopsis"]
        doc_words = len(WORD_RE.findall(document))
        if doc_words < args.min_doc_words:
            removed["document < %d words" % args.min_doc_words] += 1
            continue
        if doc_words > args.max_doc_words:
            removed["document > %d words" % args.max_doc_words] += 1
            continue
        if len(WORD_RE.findall(summary)) < args.min_summary_words:
            removed["summary < %d words" % args.min_summary_words] += 1
            continue
        if contains_sequence(norm_tokens(first_sentence(document)), norm_tokens(summary)):
            removed["summary copied from the first sentence"] += 1
            continue
        seen_ids[r["package"]] += 1
        candidates.append((r, document, summary))
    for r, document, summary in candidates:
        ex_id = r["package"]
        if seen_ids[ex_id] > 1:  # one package, several different descriptions
            ex_id += "@" + hashlib.sha256((document + "\0" + summary).encode("utf-8")).hexdigest()[:8]
        example = {
            "id": ex_id,
            "document": document,
            "summary": summary,
            "_source": r["source"],
            "_first": " ".join(" ".join(r["paragraphs"][0]).lower().split()),
        }
        prev = kept.get((document, summary))
        if prev is not None:
            removed["duplicate (document, summary)"] += 1
            if ex_id < prev["id"]:
                kept[(document, summary)] = example
            continue
        kept[(document, summary)] = example

    examples = sorted(kept.values(), key=lambda e: e["id"])
    uf = UnionFind()
    for e in examples:
        uf.find("src:" + e["_source"])
        if len(e["_first"].split()) >= args.min_shared_words:
            uf.union("src:" + e["_source"], "par:" + e["_first"])
    # Representative: the smallest source-package name in each component.
    rep = {}
    for e in examples:
        root = uf.find("src:" + e["_source"])
        name = e["_source"]
        if root not in rep or name < rep[root]:
            rep[root] = name
    out = {name: [] for name in SPLITS}
    group_sizes = collections.Counter()
    for e in examples:
        group = rep[uf.find("src:" + e["_source"])]
        e["_group"] = group
        group_sizes[group] += 1
        out[split_of(group, args.split)].append(e)
    return out, removed, group_sizes


def length_stats(values):
    if not values:
        return {"mean": 0, "median": 0, "p95": 0, "max": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {
        "mean": round(statistics.fmean(ordered), 1),
        "median": float(statistics.median(ordered)),
        "p95": p95,
        "max": ordered[-1],
    }


def write_outputs(out_dir, splits, stats, removed, group_sizes, header):
    """Writes OUT/{train,validation,test}.jsonl and OUT/stats.json (stats plus removals, groups and
    per-split counts and length statistics); prints the summary under `header` unless it is None.
    Examples are dicts with id, document, summary and _group. Shared with build_rfc_dataset.py.

    Each file is written beside its name and renamed over it, stats.json last (an earlier one is removed
    first): an interrupted run leaves the earlier files or no stats.json, never a cut-off split that
    reads as a smaller one."""
    os.makedirs(out_dir, exist_ok=True)
    stats = dict(stats)
    stats.update(
        {
            "removed": dict(sorted(removed.items())),
            "groups": len(group_sizes),
            "largest_group": (group_sizes.most_common(1)[0] if group_sizes else None),
            "splits": {},
        }
    )
    written = []  # (temporary, final) paths
    try:
        for name in SPLITS:
            path = os.path.join(out_dir, name + ".jsonl")
            written.append((path + ".tmp", path))
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                for e in splits[name]:
                    row = {"id": e["id"], "document": e["document"], "summary": e["summary"]}
                    f.write(json.dumps(row, ensure_ascii=False))
                    f.write("\n")
        for name in SPLITS:
            rows = splits[name]
            stats["splits"][name] = {
                "examples": len(rows),
                "groups": len({e["_group"] for e in rows}),
                "document_words": length_stats([len(WORD_RE.findall(e["document"])) for e in rows]),
                "summary_words": length_stats([len(WORD_RE.findall(e["summary"])) for e in rows]),
            }
        path = os.path.join(out_dir, "stats.json")
        written.append((path + ".tmp", path))
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
            f.write("\n")
        if os.path.exists(path):
            os.remove(path)  # the splits change first: without it the directory says it is incomplete
        for tmp, final in written:
            os.replace(tmp, final)
    finally:
        for tmp, _ in written:
            if os.path.exists(tmp):
                os.remove(tmp)
    if header is None:
        return
    print(header)
    for reason, n in sorted(removed.items()):
        print("  removed, %s: %d" % (reason, n))
    if group_sizes:
        big = group_sizes.most_common(1)[0]
        print("groups: %d (largest: %s, %d examples)" % (len(group_sizes), big[0], big[1]))
    for name in SPLITS:
        sp = stats["splits"][name]
        d, m = sp["document_words"], sp["summary_words"]
        print(
            "%-10s %6d examples %6d groups | document words mean %.1f median %.1f p95 %d | "
            "summary words mean %.1f median %.1f p95 %d"
            % (name, sp["examples"], sp["groups"], d["mean"], d["median"], d["p95"], m["mean"], m["median"], m["p95"])
        )
    print("wrote %s/{train,validation,test}.jsonl and stats.json" % out_dir)


def find_lists(lists_dir):
    names = sorted(os.listdir(lists_dir)) if os.path.isdir(lists_dir) else []
    translation = [os.path.join(lists_dir, n) for n in names if "_i18n_Translation-en" in n]
    packages = [os.path.join(lists_dir, n) for n in names if re.search(r"_Packages(\.[a-z0-9]+)?$", n)]
    return translation, packages


def empty_split_problem(splits, shares, removed, total, records_name, filters):
    """What is wrong where a split asked for (a share above 0) came out empty, else None. Such a split is no
    dataset: `srformer train` and `eval` refuse it later ("has no examples"); say why before writing."""
    empty = [name for name, share in zip(SPLITS, shares) if share > 0 and not splits[name]]
    if not empty:
        return None
    kept = sum(len(rows) for rows in splits.values())
    why = ", ".join("%s: %d" % kv for kv in sorted(removed.items())) or "none"
    named = ", ".join(empty[:-1]) + " and " + empty[-1] if len(empty) > 1 else empty[0]
    return "the %s split%s would be empty: %d of %d %s kept (removed: %s); loosen the filters (%s)" % (
        named, "s" if len(empty) > 1 else "", kept, total, records_name, why, filters)


def parse_with_split(parser, argv):
    """Adds --split and --quiet to parser, parses argv and checks the split percentages."""
    parser.add_argument("--split", default="90,5,5", help="train,validation,test percentages (default %(default)s)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error("--out %s is a file; give a directory (new or an earlier build's)" % args.out)
    given = args.split
    try:
        args.split = [float(x) for x in given.split(",")]
    except ValueError:
        args.split = []  # "90,5,x" ended in a traceback
    # nan passed the checks below (every comparison with it is false) and put every group in test.
    if (len(args.split) != 3 or not all(math.isfinite(x) and x >= 0 for x in args.split)
            or abs(sum(args.split) - 100) > 1e-9):
        parser.error("--split needs three non-negative percentages summing to 100, e.g. 90,5,5; got '%s'" % given)
    # A minimum over its maximum removes every record: three empty splits and exit 0.
    for what in ("doc", "summary"):
        low, high = getattr(args, "min_%s_words" % what, None), getattr(args, "max_%s_words" % what, None)
        # At 0 an empty document passed (an RFC whose introduction is all figures), which `srformer train`
        # and `eval` refuse.
        if low is not None and low < 1:
            parser.error("--min-%s-words needs at least 1: srformer train and eval refuse an empty %s"
                         % (what, "document" if what == "doc" else what))
        if low is not None and high is not None and low > high:
            parser.error("--min-%s-words %d is more than --max-%s-words %d: no record would pass"
                         % (what, low, what, high))
    return args


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--lists-dir", default="/var/lib/apt/lists", help="apt lists (default %(default)s)")
    p.add_argument("--translation", action="append", default=[], help="Translation-en file (repeatable)")
    p.add_argument("--packages", action="append", default=[], help="Packages file (repeatable)")
    p.add_argument("--apt-update", action="store_true", help="run apt-get -o Acquire::Languages=en update first")
    p.add_argument("--min-doc-words", type=int, default=20)
    p.add_argument("--max-doc-words", type=int, default=400)
    p.add_argument("--min-summary-words", type=int, default=2)
    p.add_argument("--min-shared-words", type=int, default=5, help="first paragraphs shorter than this do not merge groups")
    return parse_with_split(p, argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.apt_update:
        subprocess.run(["apt-get", "-o", "Acquire::Languages=en", "update"], check=True)
    translation, packages = list(args.translation), list(args.packages)
    if not translation and not packages:
        translation, packages = find_lists(args.lists_dir)
        if not translation:
            print(
                "build_dataset: no *_i18n_Translation-en list in %s; run (as root)\n"
                "  apt-get -o Acquire::Languages=en update\nor pass --apt-update" % args.lists_dir,
                file=sys.stderr,
            )
            return 2
    try:
        records = collect_records(translation, packages)
    except ListError as e:  # a traceback before
        print("build_dataset: %s; check --translation / --packages (or --lists-dir)" % e, file=sys.stderr)
        return 2
    splits, removed, group_sizes = build(records, args)
    problem = empty_split_problem(splits, args.split, removed, len(records), "description records",
                                  "--min-doc-words, --max-doc-words, --min-summary-words")
    if problem:
        print("build_dataset: " + problem + " or give more lists", file=sys.stderr)
        return 1

    stats = {
        "inputs": {"translation": translation, "packages": packages},
        "description_records": len(records),
    }
    header = "description records: %d (from %d lists)" % (len(records), len(translation) + len(packages))
    write_outputs(args.out, splits, stats, removed, group_sizes, None if args.quiet else header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
