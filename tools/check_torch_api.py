#!/usr/bin/env python3
"""Compile-checks every source of a build against another LibTorch's headers, without linking.

The GPU build uses PyTorch's bundled LibTorch (2.x) while this machine builds against Debian's 1.13, so
an API that moved between them would only show on a GPU machine. Debian's newer suites carry newer
libtorch-dev packages (trixie: 2.6, sid: 2.14 at the time of writing); their headers are enough to
compile each translation unit with -fsyntax-only, using the flags CMake recorded for it in
compile_commands.json, the LibTorch include paths swapped and the precompiled header left out (so each
file must also include what it uses).

  tools/check_torch_api.py --deb URL_OR_FILE [--std c++20] [--build build] [--jobs N] [FILTER ...]
  tools/check_torch_api.py --root DIR ...   (an unpacked libtorch-dev: DIR/usr/include/ATen ...;
                                             --root / checks the installed one, e.g. under another --std)

URL example: http://deb.debian.org/debian/pool/main/p/pytorch/libtorch-dev_2.6.0+dfsg-7_amd64.deb
FILTERs keep only sources whose path contains one of them. Exit status 1 if any file fails.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.request


def unpack(deb, into):
    if deb.startswith(("http://", "https://")):
        local = os.path.join(into, os.path.basename(deb))
        print(f"downloading {deb}", flush=True)
        urllib.request.urlretrieve(deb, local)
        deb = local
    root = os.path.join(into, "root")
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return root


def check_command(entry, root, std):
    """The recorded compile command, turned into a syntax check against root's headers."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    old_api = "/usr/include/torch/csrc/api/include"
    out, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-include"):  # the object file; the precompiled header
            skip = True
            continue
        if arg in ("-c", "-Winvalid-pch") or arg.startswith("-std="):
            continue
        out.append(root + old_api if arg == old_api else arg)
    # root's include dir goes first, ahead of the system's /usr/include with its own ATen (for root /,
    # the system's LibTorch under another standard, naming /usr/include would break #include_next).
    first = [] if root == "/" else ["-isystem", root + "/usr/include"]
    return [args[0]] + first + ["-isystem", root + old_api, f"-std={std}", "-fsyntax-only"] + out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--deb", help="libtorch-dev .deb (URL or file)")
    source.add_argument("--root", help="an unpacked libtorch-dev")
    parser.add_argument("--std", default="c++20", help="C++ standard (LibTorch >= 2.13 requires c++20)")
    parser.add_argument("--build", default="build", help="build dir with compile_commands.json")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("filters", nargs="*")
    opts = parser.parse_args()

    db = os.path.join(opts.build, "compile_commands.json")
    if not os.path.exists(db):
        sys.exit(f"{db} not found: configure the build first (cmake -S . -B {opts.build})")
    entries = [e for e in json.load(open(db))
               if "cmake_pch" not in e["file"] and not os.path.abspath(e["file"]).startswith(
                   os.path.abspath(opts.build) + os.sep)
               and (not opts.filters or any(f in e["file"] for f in opts.filters))]

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.realpath(opts.root) if opts.root else unpack(opts.deb, tmp)
        if not os.path.isdir(os.path.join(root, "usr/include/ATen")):
            sys.exit(f"{root}/usr/include/ATen not found: not an unpacked libtorch-dev")

        def run(entry):
            done = subprocess.run(check_command(entry, root, opts.std), cwd=entry["directory"],
                                  capture_output=True, text=True)
            return entry["file"], done.returncode, done.stderr

        headers = ("/usr/",) if root == "/" else ("/usr/", root)
        failed = warned = 0
        with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
            for path, rc, err in pool.map(run, entries):
                lines = err.splitlines()
                if rc != 0:
                    failed += 1
                    errors = [line for line in lines if "error" in line]
                    print(f"FAIL {path}\n  " + "\n  ".join(errors[:12]), flush=True)
                # Warnings in our own files (the headers are -isystem): a standard change can add some.
                ours = [line for line in lines if "warning:" in line and not line.startswith(headers)]
                if ours:
                    warned += 1
                    print(f"WARN {path}\n  " + "\n  ".join(ours[:12]), flush=True)
        print(f"{len(entries)} files checked against {root} ({opts.std}): {failed} failed, "
              f"{warned} with warnings in our code")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
