"""bench/table2_mini.sh names the step that failed and shows the end of its log, with a stand-in
srformer that fails where it is told to (FAIL_AT: init-model, train or eval)."""
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

FAKE_SRFORMER = """\
#!/usr/bin/env bash
# Stand-in srformer: fails with a message at FAIL_AT, else writes what the next step reads.
cmd=$1
if [ "$cmd" = "$FAIL_AT" ]; then echo "srformer $cmd: the stand-in's error" >&2; exit 1; fi
case "$cmd" in
  init-model) mkdir -p "${@: -1}" && echo '{}' >"${@: -1}/config.json" ;;
  convert) mkdir -p "$3" ;;
  train) out=$(for a in "$@"; do [ "${prev:-}" = --out ] && echo "$a"; prev=$a; done)
         mkdir -p "$out" && echo '{"loss": 1.0}' >"$out/train_log.jsonl" && touch "$out/model.safetensors" ;;
  eval) out=$(for a in "$@"; do [ "${prev:-}" = --out ] && echo "$a"; prev=$a; done)
        r='{"fmeasure": {"low": 0.1, "mid": 0.2, "high": 0.3}}'
        mkdir -p "$out" && echo "{\\"rouge\\": {\\"rouge1\\": $r, \\"rouge2\\": $r, \\"rougeL\\": $r}}" >"$out/scores.json" ;;
esac
"""


class Table2MiniTest(unittest.TestCase):
    def run_script(self, fail_at):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "build", "bin"))
            fake = os.path.join(d, "build", "bin", "srformer")
            with open(fake, "w") as f:
                f.write(FAKE_SRFORMER)
            os.chmod(fake, 0o755)
            os.makedirs(os.path.join(d, "data"))
            for split in ("train", "test"):
                with open(os.path.join(d, "data", split + ".jsonl"), "w") as f:
                    f.write('{"id": "a", "document": "x", "summary": "y"}\n')
            env = dict(os.environ, DATA=os.path.join(d, "data"), OUT=os.path.join(d, "out"), VARIANTS="full:0",
                       FAIL_AT=fail_at)
            return subprocess.run(["bash", "bench/table2_mini.sh", os.path.join(d, "build")], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=60)

    def test_a_failing_step_is_named_with_its_error(self):
        for step, what in (("init-model", "init-model"), ("train", "training full"), ("eval", "evaluating full")):
            with self.subTest(step=step):
                out = self.run_script(step)
                self.assertEqual(out.returncode, 1)
                self.assertIn(f"table2_mini: {what} failed", out.stderr)
                self.assertIn(f"srformer {step}: the stand-in's error", out.stderr)

    def test_the_table_is_printed_when_every_step_succeeds(self):
        out = self.run_script("none")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| full | - | 1.000 / 1.000 |", out.stdout)


if __name__ == "__main__":
    unittest.main()
