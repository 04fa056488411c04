"""The commands the documentation gives a user: every --flag that README.md, docs/*.md and the other READMEs
pass to srformer-server (or its image), srformer-client or `srformer COMMAND`, in a code span or a code
block, is one that program's --help names. A flag renamed or removed in the code otherwise leaves commands
in the docs that the program refuses (exit 2), found only by the user who copies them. And every default
the docs state for a server flag ("`--flag` (default X", the knobs table of docs/OPERATIONS.md) is the one
srformer-server --help gives. And docs/API.md names every field of the request, options, usage, response and
stream messages, and srformer-client and `srformer summarize` have a flag for every option (`srformer eval` for
every one that acts without sampling), which their --help texts describe alike.
  doc_flags_test.py SOURCE_DIR BIN_DIR"""
import glob
import os
import re
import subprocess
import sys
import unittest

ROOT = None
BIN = None
SUBCOMMANDS = ("check-fixture", "inspect", "summarize", "convert", "init-model", "eval", "train", "bench")
# A program of ours at the start of a command (after a path, a quote or a bracket): the server also as its
# Docker image, whose entrypoint it is; the offline tool only with one of its commands.
COMMAND = re.compile(r"(?:^|(?<=[\s/\"'(\[]))(?:(srformer-server|srformer-serve:(?:cpu|cuda)|srformer-client)"
                     r"|srformer\s+(" + "|".join(SUBCOMMANDS) + r"))(?=$|[\s\"',])")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Where one command ends and another (or a comment) begins.
SEPARATOR = re.compile(r"\s[|#;]|&&|\$\(|`")


def help_flags(argv):
    out = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s --help exited %d: %s" % (" ".join(argv), out.returncode, out.stderr))
    return set(FLAG.findall(out.stdout + out.stderr))


def known_flags(bin_dir):
    known = {"server": help_flags([os.path.join(bin_dir, "srformer-server")]),
             "client": help_flags([os.path.join(bin_dir, "srformer-client")])}
    for command in SUBCOMMANDS:
        known[command] = help_flags([os.path.join(bin_dir, "srformer"), command])
    return known


def commands(markdown):
    """Lines of code (code spans, and code block lines with their continuations joined)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.S | re.M)
    for block in blocks:
        yield from block.replace("\\\n", " ").split("\n")
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
    yield from re.findall(r"`([^`]+)`", prose)


def unknown_flags(markdown, known):
    """(program, flag, code) for each flag the code gives a program whose --help does not name it."""
    found = []
    for code in commands(markdown):
        for m in COMMAND.finditer(code):
            program = m.group(2) or ("client" if m.group(1) == "srformer-client" else "server")
            rest = SEPARATOR.split(code[m.end():], 1)[0]
            # A second program in the same command line (`cmd --x; srformer-client ...`) is checked on its own.
            rest = COMMAND.split(rest, 1)[0]
            for flag in FLAG.findall(rest):
                if flag not in known[program]:
                    found.append((program, flag, code.strip()))
    return found


def help_defaults(text):
    """{flag: default} from a --help whose entries start "  --flag": "(default X" is the default of the flag
    just before it where it follows one ("--grace-ms (default 60000)"), else of the entry's next flag (an
    entry "--a N --b N" gives a's default, then b's)."""
    defaults = {}
    for entry in re.split(r"\n(?=  --)", text):
        lead = FLAG.findall(entry.split("\n")[0])
        for m in re.finditer(r"(?:(--[a-z][a-z0-9-]*)(?: [A-Z]+)? )?\(default ([^\s;,)]+)", entry):
            if m.group(1):
                defaults.setdefault(m.group(1), m.group(2))
            elif lead:
                defaults.setdefault(lead.pop(0) if len(lead) > 1 else lead[0], m.group(2))
    return defaults


def normalized(value):
    """A default as a comparable value: sizes in bytes (64M, 4 MiB, 4194304), other words as they are."""
    value = value.split(" = ")[0].strip().strip("`").rstrip(":")  # "0 = off" is 0
    m = re.fullmatch(r"(\d+)\s*(K|M|G|T)?(?:i?B)?", value)
    if not m:
        return value
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2) or " "))


def documented_defaults(markdown):
    """(flag, default, where) for the defaults the docs state: "`--flag` (default X", "`--flag`, default X",
    and the rows of a table whose first column is "flag (default)"."""
    stated = r"`(--[a-z][a-z0-9-]*)(?: [A-Z]+)?`,?\s+\(?default `?([^;,)`\s]+(?: MiB| GiB| KiB)?)"
    found = [(m.group(1), m.group(2), m.group(0)) for m in re.finditer(stated, markdown)]
    for table in re.findall(r"^\| flag \(default\) \|.*?\n((?:\|.*\n)+)", markdown, re.M):
        for row in table.split("\n")[1:]:
            first = row.split("|")[1] if row.count("|") > 1 else ""
            for m in re.finditer(r"`(--[a-z][a-z0-9-]*)` \(([^;,)]+)", first):
                found.append((m.group(1), m.group(2), row[:80]))
    return found


def proto_fields(proto):
    """{message: [field names]} of a .proto's top-level messages (a oneof's fields are its message's)."""
    fields = {}
    for m in re.finditer(r"^message (\w+) \{\n(.*?)^\}", proto, re.S | re.M):
        fields[m.group(1)] = re.findall(r"^\s+(?:optional |repeated )?[\w.]+ (\w+) = \d+;", m.group(2), re.M)
    return fields


def table_names(markdown, header):
    """The `names` in the first column of the table under the header row `header` (a cell may list several)."""
    m = re.search(r"^" + re.escape(header) + r".*\n\|[-| ]+\|\n((?:\|.*\n)+)", markdown, re.M)
    if not m:
        return None
    return [name for row in m.group(1).splitlines() for name in re.findall(r"`(\w+)`", row.split("|")[1])]


def help_entries(text):
    """{flag: entry} of a --help: an entry starts at a line whose first word is a flag (or "(") and takes the
    indented lines after it that do not; its flags are those before its first "("; whitespace collapsed."""
    entries, current = {}, None
    for line in text.split("\n"):
        word = line.strip()
        if line[:1].isspace() and word and not word.startswith(("--", "(")) and current is not None:
            current.append(word)
            continue
        current = [word] if line[:1].isspace() and word.startswith(("--", "(")) else None
        if current is not None:
            for flag in FLAG.findall(word.split("(", 1)[0]):
                entries.setdefault(flag, current)
    return {flag: " ".join(words) for flag, words in entries.items()}


def documents(root):
    paths = ["README.md"]
    for pattern in ("docs/*.md", "models/*/README.md", "examples/**/README.md", "deploy/**/README.md"):
        paths += sorted(glob.glob(pattern, root_dir=root, recursive=True))
    return paths


class DocFlagsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.known = known_flags(BIN)

    def test_every_documented_flag_is_one_the_program_takes(self):
        problems = []
        paths = documents(ROOT)
        self.assertIn("docs/OPERATIONS.md", paths)
        for rel in paths:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                for program, flag, code in unknown_flags(f.read(), self.known):
                    problems.append("%s: %s has no flag %s: %s" % (rel, program, flag, code))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_every_documented_server_default_is_the_one_its_help_gives(self):
        server_help = subprocess.run([os.path.join(BIN, "srformer-server"), "--help"], capture_output=True, text=True,
                                     timeout=60).stdout
        defaults = help_defaults(server_help)
        self.assertEqual(defaults["--encode-piece-positions"], "2048")
        self.assertEqual(defaults["--max-connection-age-grace-ms"], "60000")
        problems, checked = [], 0
        for rel in documents(ROOT):
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                for flag, value, where in documented_defaults(f.read()):
                    if flag not in defaults:
                        continue  # another program's flag, or one whose --help states no default
                    checked += 1
                    if normalized(value) != normalized(defaults[flag]):
                        problems.append("%s: %s defaults to %s (--help), not %s: %s"
                                        % (rel, flag, defaults[flag], value, where))
        self.assertGreater(checked, 10)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_a_flag_the_program_lacks_is_found(self):
        doc = ("Run `build/bin/srformer-client --target h:1 --bogus-flag doc.txt` or\n"
               "```bash\nbuild/bin/srformer train M D --steps 3 \\\n    --no-such-flag 1   # --comment-flag\n"
               "srformer-server --model a=/m --listen x | grep --count y\n```\n"
               "and `srformer summarize --model M --stream; srformer-client --invented` and\n"
               "`docker run srformer-serve:cpu --model a=/m --made-up`, "
               '`healthcheck: {test: ["CMD", "srformer-client", "--target", "h",\n"--fictional"]}`.\n')
        found = {(program, flag) for program, flag, _ in unknown_flags(doc, self.known)}
        self.assertEqual(found, {("client", "--bogus-flag"), ("train", "--no-such-flag"), ("client", "--invented"),
                                 ("server", "--made-up"), ("client", "--fictional")})


class ApiDocTest(unittest.TestCase):
    """docs/API.md's tables name every field of the proto's messages once, and no other; the client and
    `srformer summarize` have a flag for every GenerationOptions field. A field added to the proto (fields
    16-21 were) otherwise reaches users undocumented, or only through hand-written requests."""

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "proto/srformer/v1/summarizer.proto"), encoding="utf-8") as f:
            cls.fields = proto_fields(f.read())
        with open(os.path.join(ROOT, "docs/API.md"), encoding="utf-8") as f:
            cls.api = f.read()

    def test_the_tables_name_every_field_of_their_message(self):
        self.assertIn("encoder_no_repeat_ngram_size", self.fields["GenerationOptions"])
        self.assertEqual(len(self.fields["GenerationOptions"]), len(set(self.fields["GenerationOptions"])))
        for header, message in (("| option | default when unset |", "GenerationOptions"),
                                ("| field | meaning |", "SummarizeRequest"),
                                ("| usage field | meaning |", "Usage")):
            names = table_names(self.api, header)
            self.assertIsNotNone(names, "docs/API.md has no table headed " + header)
            self.assertEqual(sorted(names), sorted(self.fields[message]),
                             "docs/API.md's table headed %s against message %s" % (header, message))

    def test_the_response_paragraphs_name_every_field(self):
        responses = self.api.split("### Responses", 1)[1].split("| usage field |", 1)[0]
        streaming = self.api.split("Streaming `TokenDelta`:", 1)[1].split("## Errors", 1)[0]
        client_json = self.api.split("`--json` prints one object per summary:", 1)[1].split("A call that fails", 1)[0]
        for message, text, where in (("SummarizeResponse", responses, "Responses"),
                                     ("Alternative", responses, "Responses"),
                                     ("TokenDelta", streaming, "Streaming"),
                                     ("SummarizeResponse", client_json, "the client's --json")):
            named = set(re.findall(r"`(\w+)`|\"(\w+)\"", text))
            named = {a or b for a, b in named}
            missing = [f for f in self.fields[message] if f not in named]
            self.assertEqual(missing, [], "docs/API.md (%s) does not name %s's fields" % (where, message))

    def test_every_generation_option_has_a_flag(self):
        programs = {"srformer-client": [os.path.join(BIN, "srformer-client")],
                    "srformer summarize": [os.path.join(BIN, "srformer"), "summarize"]}
        # early_stopping_mode's other two values are --early-stopping's true and false; bad_words takes one
        # word a flag, repeated.
        flag_of = {"early_stopping_mode": "--early-stopping-never", "bad_words": "--bad-word"}
        for program, argv in programs.items():
            flags = help_flags(argv)
            missing = [f for f in self.fields["GenerationOptions"]
                       if flag_of.get(f, "--" + f.replace("_", "-")) not in flags]
            self.assertEqual(missing, [], "%s --help has no flag for these GenerationOptions fields" % program)

    def test_eval_has_a_flag_for_every_option_that_acts_without_sampling(self):
        # `srformer eval` never samples and scores one summary per document; its --seed seeds the bootstrap.
        sampling = {"do_sample", "temperature", "top_k", "top_p", "seed", "min_p", "typical_p", "epsilon_cutoff",
                    "eta_cutoff", "num_return_sequences"}
        self.assertTrue(sampling <= set(self.fields["GenerationOptions"]))
        flag_of = {"early_stopping_mode": "--early-stopping-never", "bad_words": "--bad-word"}
        flags = help_flags([os.path.join(BIN, "srformer"), "eval"])
        missing = [f for f in self.fields["GenerationOptions"]
                   if f not in sampling and flag_of.get(f, "--" + f.replace("_", "-")) not in flags]
        self.assertEqual(missing, [], "srformer eval --help has no flag for these GenerationOptions fields")

    def test_every_generation_flag_reads_the_same_in_every_program(self):
        # A flag's entry: the --help line that names it before any "(" and the lines that carry on that
        # entry, whitespace collapsed. --num-return-sequences says how each program prints the sequences.
        programs = {"srformer-client": [os.path.join(BIN, "srformer-client")],
                    "srformer summarize": [os.path.join(BIN, "srformer"), "summarize"],
                    "srformer eval": [os.path.join(BIN, "srformer"), "eval"]}
        flag_of = {"early_stopping_mode": "--early-stopping-never", "bad_words": "--bad-word"}
        sampling = {"do_sample", "temperature", "top_k", "top_p", "seed", "min_p", "typical_p", "epsilon_cutoff",
                    "eta_cutoff", "num_return_sequences"}
        entries = {}
        for program, argv in programs.items():
            out = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60).stdout
            entries[program] = help_entries(out)
        problems = []
        for field in self.fields["GenerationOptions"]:
            if field == "num_return_sequences":
                continue
            flag = flag_of.get(field, "--" + field.replace("_", "-"))
            texts = {program: entries[program].get(flag) for program in programs
                     if program != "srformer eval" or field not in sampling}
            if len(set(texts.values())) != 1:
                problems.append("%s:\n%s" % (flag, "\n".join("  %s: %s" % item for item in texts.items())))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_a_field_the_table_lacks_is_found(self):
        doc = "| option | default when unset | accepted |\n|---|---|---|\n| `a`, `b` | x | y |\n| `c` | `d` |\n\n| z |"
        self.assertEqual(table_names(doc, "| option | default when unset |"), ["a", "b", "c"])
        proto = "message M {\n  optional int32 a = 1;\n  oneof e {\n    T b = 2;\n  }\n  repeated x.Y c = 3;  // d\n}\n"
        self.assertEqual(proto_fields(proto), {"M": ["a", "b", "c"]})


if __name__ == "__main__":
    ROOT = sys.argv.pop(1)
    BIN = sys.argv.pop(1)
    unittest.main()
