"""The commands the documentation gives a user: every --flag that README.md, docs/*.md and the other READMEs
pass to srformer-server (or its image), srformer-client or `srformer COMMAND`, in a code span or a code
block, is one that program's --help names. A flag renamed or removed in the code otherwise leaves commands
in the docs that the program refuses (exit 2), found only by the user who copies them. And every default
the docs state for a server flag ("`--flag` (default X", the knobs table of docs/OPERATIONS.md) is the one
srformer-server --help gives.
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


if __name__ == "__main__":
    ROOT = sys.argv.pop(1)
    BIN = sys.argv.pop(1)
    unittest.main()
