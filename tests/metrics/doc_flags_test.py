"""The commands the documentation gives a user: every --flag that README.md, docs/*.md and the other READMEs
pass to srformer-server (or its image), srformer-client or `srformer COMMAND`, in a code span or a code
block, is one that program's --help names. A flag renamed or removed in the code otherwise leaves commands
in the docs that the program refuses (exit 2), found only by the user who copies them.
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
