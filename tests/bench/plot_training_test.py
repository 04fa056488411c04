"""bench/plot_training.py draws runs whose figures span no range (ROUGE 0 everywhere, one logged loss):
a smoke run of bench/table2_mini.sh gives such runs."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "plot_training.py")


def run(runs, rouge):
    return {"group": "smoke", "run": runs, "losses": [[4, 7.8]], "mean_words": 0.0,
            "rouge": {t: {"low": rouge, "mid": rouge, "high": rouge} for t in ("rouge1", "rouge2", "rougeL")}}


class PlotTrainingTest(unittest.TestCase):
    def plot(self, runs):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "runs.jsonl")
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in runs)
            out = subprocess.run([sys.executable, SCRIPT, "plot", path, os.path.join(d, "plots")],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            return sorted(os.listdir(os.path.join(d, "plots")))

    def test_runs_without_a_range_are_drawn(self):
        self.assertEqual(self.plot([run("full", 0.0), run("srformer-8", 0.0)]),
                         ["loss_smoke.svg", "rouge1_smoke.svg"])

    def test_runs_with_a_range_are_drawn(self):
        self.assertEqual(self.plot([run("full", 0.1), run("srformer-8", 0.2)]),
                         ["loss_smoke.svg", "rouge1_smoke.svg"])


if __name__ == "__main__":
    unittest.main()
