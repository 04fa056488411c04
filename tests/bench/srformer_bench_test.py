"""`srformer bench`: it writes its random model again where the cached directory (shared under TMPDIR by
every checkout) holds another model's config.json, instead of timing that model under the asked-for name;
its --trace files of different settings do not write over each other; a TMPDIR it cannot use is named;
--only generate times whole generate() calls on a model directory.
  srformer_bench_test.py SRFORMER_BINARY"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BINARY = None
NAME = "t5-small-srformer-s64"


class SrformerBenchTest(unittest.TestCase):
    def bench(self, tmp):
        out = subprocess.run([BINARY, "bench", "--only", "decode", "--json", "--model", NAME, "--batch", "1",
                              "--steps", "1", "--input-tokens", "8", "--threads", "1"],
                             env=dict(os.environ, TMPDIR=tmp), capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout.splitlines()[-1]), out.stderr

    def test_a_cached_model_of_another_config_is_written_again(self):
        tmp = tempfile.mkdtemp(prefix="bench-cache-test.")
        try:
            fresh, _ = self.bench(tmp)
            cached = os.path.join(tmp, "srformer-bench-models", NAME, "config.json")
            with open(cached) as f:
                config = json.load(f)
            self.assertEqual(config["srformer"]["cross_attention"], "srformer")
            config["srformer"] = {"cross_attention": "full"}  # as another version or shape would have left it
            with open(cached, "w") as f:
                json.dump(config, f)
            again, err = self.bench(tmp)
            self.assertIn("describes another model", err)
            with open(cached) as f:
                self.assertEqual(json.load(f)["srformer"]["cross_attention"], "srformer")
            # The decode figures are the SRformer model's: its per-request state, not full attention's.
            self.assertEqual(again["state_bytes_per_request"], fresh["state_bytes_per_request"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_trace_files_of_each_setting_are_kept(self):
        tmp = tempfile.mkdtemp(prefix="bench-trace-test.")
        try:
            prefix = os.path.join(tmp, "trace")
            for only in (["--only", "decode", "--model", NAME, "--batch", "1", "--steps", "1", "--input-tokens", "8"],
                         ["--only", "cross", "--quick", "--lengths", "128"]):
                out = subprocess.run([BINARY, "bench", "--threads", "1", "--kernels", "both", "--trace", prefix] + only,
                                     env=dict(os.environ, TMPDIR=tmp), capture_output=True, text=True, timeout=600)
                self.assertEqual(out.returncode, 0, out.stderr)
            traces = sorted(f for f in os.listdir(tmp) if f.startswith("trace."))
            decode = f"trace.{NAME}.b1"
            self.assertEqual(traces, sorted([f"{decode}.encode.json"] + [
                f"{decode}.kernels-{k}{part}.json" for k in ("off", "on") for part in ("", ".start")] + [
                f"trace.cross.k128.kernels-{k}.json" for k in ("off", "on")]))
            for name in traces:  # each one a whole trace, not one cut off by the other's write
                with open(os.path.join(tmp, name)) as f:
                    json.load(f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_cross_attention_state_printed_is_the_json_figure(self):
        # The text line printed each variant's state in whole MiB: at k = 128 full attention's and segmented's
        # (512 KiB) and srformer_on_switch's (898 KiB) read "state 0 MiB". It is in KiB now, as the JSON's bytes.
        args = [BINARY, "bench", "--only", "cross", "--quick", "--lengths", "128", "--threads", "1"]
        text = subprocess.run(args, capture_output=True, text=True, timeout=600)
        self.assertEqual(text.returncode, 0, text.stderr)
        row = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=600).stdout)
        variants = ("full", "segmented", "srformer", "srformer_on_switch")
        printed = dict(re.findall(r"  (\w+) +[0-9.]+ us \(state (\d+) KiB\)", text.stdout))
        self.assertEqual(printed, {v: str(row[f"{v}_state_bytes"] // 1024) for v in variants}, text.stdout)
        for v in variants:
            self.assertGreater(int(printed[v]), 0, text.stdout)

    def test_a_tmpdir_that_is_not_a_directory_is_named(self):
        out = subprocess.run([BINARY, "bench", "--only", "decode"], env=dict(os.environ, TMPDIR="/nonexistent-tmpdir"),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn("TMPDIR='/nonexistent-tmpdir' is not a directory", out.stderr)

    def test_generate_times_whole_calls_on_a_model_directory(self):
        # --only generate runs generate() on the demo model: one JSON object per search and batch, with its
        # wall and CPU time; without --generate-model it says what it needs.
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "debian-synopsis-t5")
        out = subprocess.run([BINARY, "bench", "--only", "generate", "--generate-model", model, "--batch", "1,2",
                              "--steps", "3", "--input-tokens", "8", "--threads", "1", "--json"],
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual([(r["search"], r["batch"]) for r in rows],
                         [("greedy", 1), ("greedy", 2), ("beam4", 1), ("beam4", 2)])
        for r in rows:
            self.assertEqual((r["bench"], r["new_tokens"], r["input_tokens"]), ("generate", 3, 8))
            self.assertGreater(r["ms"], 0)
            self.assertGreater(r["cpu_ms"], 0)
        out = subprocess.run([BINARY, "bench", "--only", "generate"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn("--only generate needs --generate-model DIR", out.stderr)


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
