"""The bench scripts that start srformer-server (bench/*.sh with bench/server_lib.sh) stop it and remove
their temporary files however they end: a client that fails, Ctrl-C, SIGTERM; and they fail, saying why,
when the server never listens. Run against stand-in binaries (shell scripts), so no model is loaded."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Stand-ins in Python, which (like the C++ binaries, unlike bash) can handle a SIGINT that the script's
# shell ignores for its background jobs.
FAKE_SERVER = """\
#!/usr/bin/python3
# Stand-in server: records its pid, says where it listens (unless FAKE_SILENT), then waits to be stopped;
# SIGINT stops it too unless ignored on entry (as the scripts start it, in the background), as it does
# srformer-server: a script's Ctrl-C stops it through the script's SIGTERM.
import os, signal, sys, time
with open(os.environ["FAKE_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
if not os.environ.get("FAKE_SILENT"):
    print("listening on 127.0.0.1:9\\nmetrics on 127.0.0.1:9/metrics", file=sys.stderr, flush=True)
    # what the scripts read from a server's shutdown log
    print("model 'm': 3 decode steps, 1.000 s in steps, engine overhead 1.00%\\n"
          "model 'm': 2 encoder calls, 0.100 s encoding", file=sys.stderr, flush=True)
time.sleep(300)
"""

FAKE_CLIENT = """\
#!/usr/bin/python3
# Stand-in client: FAKE_CLIENT=fail exits 3 at once; =report prints a load report; =wait waits FAKE_CLIENT_S (3 s), and on SIGINT
# (unless ignored on entry, as in a script's background job) or SIGTERM prints a report and exits 130 or 143, as
# srformer-client --load does (its partial report). Each records its pid in FAKE_CLIENT_LOG.
import json, os, signal, sys, time
with open(os.environ["FAKE_CLIENT_LOG"], "a") as f:
    f.write(f"started {os.getpid()}\\n")
if os.environ["FAKE_CLIENT"] == "fail":
    sys.exit(3)
if os.environ["FAKE_CLIENT"] == "report":  # a --load --json report: 10 tokens/s per stream
    concurrency = int(sys.argv[sys.argv.index("--concurrency") + 1])
    print(json.dumps({"concurrency": concurrency, "tokens_per_s": 10.0 * concurrency}))
    sys.exit(0)
def interrupted(signum, _):
    print('{"tokens_per_s": 1}', flush=True)
    sys.exit(128 + signum)
if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
    signal.signal(signal.SIGINT, interrupted)
signal.signal(signal.SIGTERM, interrupted)
time.sleep(float(os.environ.get("FAKE_CLIENT_S", "3")))
print('{"tokens_per_s": 1}')
"""


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


class BenchScriptsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench-scripts-test.")
        self.bin = os.path.join(self.dir, "build", "bin")
        os.makedirs(self.bin)
        for name, text in (("srformer-server", FAKE_SERVER), ("srformer-client", FAKE_CLIENT), ("srformer", "exit 0\n")):
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.model = os.path.join(self.dir, "model")
        self.cache = os.path.join(self.dir, "cache")
        os.makedirs(os.path.join(self.cache, "t5-small"))
        open(os.path.join(self.cache, "t5-small", "model.safetensors"), "w").close()
        os.makedirs(self.model)
        self.tmp = os.path.join(self.dir, "tmp")  # the scripts' mktemp files
        os.makedirs(self.tmp)
        self.pids = os.path.join(self.dir, "pids")
        self.client_log = os.path.join(self.dir, "client.log")
        self.doc = os.path.join(ROOT, "docs", "DEMO.md")

    def tearDown(self):
        for pid in self.server_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def server_pids(self):
        if not os.path.exists(self.pids):
            return []
        with open(self.pids) as f:
            return [int(line) for line in f if line.strip()]

    def scripts(self):
        server, build = os.path.join(self.bin, "srformer-server"), os.path.join(self.dir, "build")
        return {
            "first_request": ["bench/first_request.sh", self.model],
            "serve_load": ["bench/serve_load.sh", build, self.model, "1", self.doc],
            "serve_sweep": ["bench/serve_sweep.sh", build],
            "server_ab": ["bench/server_ab.sh", server, server, self.model],
            "server_bursts": ["bench/server_bursts.sh", server, self.model],
            "server_long_document": ["bench/server_long_document.sh", self.model, self.doc, server],
            "server_soak": ["bench/server_soak.sh", server, self.model],
            "server_state_budget": ["bench/server_state_budget.sh", self.model, self.doc, server, "0"],
            "server_cpu_burn": ["bench/server_cpu_burn.sh", self.model, server],
            "server_idle_memory": ["bench/server_idle_memory.sh", self.model, server],
        }

    def start(self, args, client, **env):
        e = dict(os.environ, TMPDIR=self.tmp, FAKE_PIDS=self.pids, FAKE_CLIENT=client, FAKE_CLIENT_LOG=self.client_log,
                 CLIENT=os.path.join(self.bin, "srformer-client"), CACHE=self.cache, SHAPES="t5-small", LEVELS="1",
                 BUILD=os.path.relpath(os.path.join(self.dir, "build"), ROOT), ROUNDS="2", BURSTS="2")
        e.update(env)
        return subprocess.Popen(["bash"] + args, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)  # its own process group, as a terminal's job

    def wait_for(self, condition, seconds=20):
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def assert_cleaned_up(self, name, proc, err):
        self.assertTrue(self.server_pids(), f"{name}: no server started; stderr: {err}")
        for pid in self.server_pids():
            self.assertTrue(self.wait_for(lambda: not alive(pid), 5), f"{name}: server {pid} left running")
        self.assertEqual(os.listdir(self.tmp), [], f"{name}: temporary files left")

    def clients(self):
        with open(self.client_log) as f:
            return len(f.readlines())

    def reset(self):
        for path in (self.pids, self.client_log):
            if os.path.exists(path):
                os.remove(path)

    def test_failing_client_stops_the_server(self):
        for name, args in self.scripts().items():
            with self.subTest(script=name):
                self.reset()
                proc = self.start(args, "fail")
                _, err = proc.communicate(timeout=60)
                self.assertNotEqual(proc.returncode, 0, f"{name}: {err}")
                self.assert_cleaned_up(name, proc, err)

    def interrupt(self, sig, whole_group):
        # The client runs far longer than the script may take to end: a script waited for the client it ran in
        # the foreground to finish its whole load before its trap could answer a SIGTERM. (server_soak's
        # background loads, each a few requests, end with the server.)
        for name, args in self.scripts().items():
            with self.subTest(script=name, signal=sig):
                self.reset()
                proc = self.start(args, "wait", FAKE_CLIENT_S="3" if name == "server_soak" else "60")
                self.assertTrue(self.wait_for(lambda: os.path.exists(self.client_log)), f"{name}: no client ran")
                time.sleep(0.5)  # server_soak starts several at once
                clients = self.clients()
                if whole_group:
                    os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole foreground job
                else:
                    proc.send_signal(sig)  # timeout(1), a supervisor: the script alone
                try:
                    _, err = proc.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    self.fail(f"{name}: still running 15 s after {sig.name}")
                self.assertNotEqual(proc.returncode, 0, f"{name}: exit 0 after {sig.name}")
                self.assertEqual(self.clients(), clients, f"{name}: went on with another client after {sig.name}")
                self.assert_cleaned_up(name, proc, err)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # clients left in the background, if any
                except ProcessLookupError:
                    pass

    def test_ctrl_c_stops_the_server(self):
        self.interrupt(signal.SIGINT, whole_group=True)

    def test_sigterm_stops_the_server(self):
        self.interrupt(signal.SIGTERM, whole_group=False)

    def test_ctrl_c_stops_the_load_running_in_the_background(self):
        # The load these scripts run in the background while they send long documents ignores a Ctrl-C (a
        # script's background job), as srformer-client keeps a SIGINT ignored on entry: it went on after the
        # script had ended, against the stopped server, its stderr still the script's.
        for name in ("server_long_document", "server_state_budget"):
            with self.subTest(script=name):
                self.reset()
                proc = self.start(self.scripts()[name], "wait", FAKE_CLIENT_S="60")
                self.assertTrue(self.wait_for(lambda: os.path.exists(self.client_log)), f"{name}: no client ran")
                time.sleep(0.5)
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    _, err = proc.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    self.fail(f"{name}: its output still open 15 s after Ctrl-C")
                with open(self.client_log) as f:
                    for pid in [int(line.split()[1]) for line in f]:
                        self.assertTrue(self.wait_for(lambda: not alive(pid), 5), f"{name}: client {pid} left running")
                self.assert_cleaned_up(name, proc, err)

    def sweep(self, levels):
        proc = self.start(self.scripts()["serve_sweep"], "report", LEVELS=levels)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return {line["load"]["concurrency"]: line["vs_one_stream"] for line in lines}

    def test_serve_sweep_ratios_are_to_one_stream(self):
        self.assertEqual(self.sweep("1 4 16"), {1: 1.0, 4: 4.0, 16: 16.0})
        # Without a one-stream level first there is nothing to divide by: no ratio, not one to another level.
        self.assertEqual(self.sweep("4 16"), {4: None, 16: None})
        self.assertEqual(self.sweep("4 1 16"), {4: None, 1: 1.0, 16: 16.0})

    def test_first_request_takes_an_absolute_build_directory(self):
        proc = self.start(self.scripts()["first_request"], "fail", BUILD=os.path.join(self.dir, "build"))
        _, err = proc.communicate(timeout=30)
        self.assertTrue(os.path.exists(self.client_log), f"no client ran: {err}")
        self.assert_cleaned_up("first_request", proc, err)

    def test_server_that_never_listens_fails_with_a_message(self):
        proc = self.start(self.scripts()["server_bursts"], "fail", FAKE_SILENT="1", SERVER_START_S="1")
        _, err = proc.communicate(timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("not listening after 1 s", err)
        self.assertFalse(os.path.exists(self.client_log), "a client was started with no address")
        self.assert_cleaned_up("server_bursts", proc, err)


class ScaleEosRowTest(unittest.TestCase):
    """bench/scale_eos_row.py scales the embedding rows of the EOS ids, one id or a list of them."""

    def scaled_rows(self, eos):
        import array
        import struct

        vocab, width = 5, 3
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
            os.mkdir(src)
            with open(os.path.join(src, "config.json"), "w") as f:
                json.dump({"d_model": width, "eos_token_id": eos}, f)
            values = array.array("f", [float(i + 1) for i in range(vocab * width)])
            header = json.dumps({"shared.weight": {"dtype": "F32", "shape": [vocab, width],
                                                    "data_offsets": [0, len(values) * 4]}}).encode()
            with open(os.path.join(src, "model.safetensors"), "wb") as f:
                f.write(struct.pack("<Q", len(header)) + header + values.tobytes())
            proc = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "scale_eos_row.py"), src, dst, "2"],
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(dst, "model.safetensors"), "rb") as f:
                data = f.read()
            out = array.array("f")
            out.frombytes(data[8 + len(header):])
            return [i for i in range(vocab) if out[i * width:(i + 1) * width] != values[i * width:(i + 1) * width]]

    def test_one_eos_id(self):
        self.assertEqual(self.scaled_rows(1), [1])

    def test_a_list_of_eos_ids_scales_each_row(self):
        self.assertEqual(self.scaled_rows([1, 3]), [1, 3])


if __name__ == "__main__":
    unittest.main()
