"""`srformer bench` writes its random model again where the cached directory (shared under TMPDIR by every
checkout) holds another model's config.json, instead of timing that model under the asked-for name.
  bench_cache_test.py SRFORMER_BINARY"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BINARY = None
NAME = "t5-small-srformer-s64"


class BenchCacheTest(unittest.TestCase):
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


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
