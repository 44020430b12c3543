"""Preflight probe, run on each host before a launch. Standard library only.

The launcher sends this file's source as ``python -c SOURCE --port P --workdir D`` so it works
before anything has been copied to the host. It prints one JSON object as its last line.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile


def check_tensorflow():
    # In a child process: a broken TensorFlow install may crash the interpreter.
    code = "import tensorflow as tf, keras; print(tf.__version__, keras.__version__)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "importing tensorflow took over 120 s"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": tail}
    tf_version, keras_version = out.stdout.split()[-2:]
    return {"ok": True, "tensorflow": tf_version, "keras": keras_version}


def check_gpus():
    if not shutil.which("nvidia-smi"):
        return {"ok": True, "gpus": [], "note": "no nvidia-smi: CPU only"}
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return {"ok": False, "gpus": [], "error": out.stderr.strip() or "nvidia-smi failed"}
    return {"ok": True, "gpus": [line for line in out.stdout.splitlines() if line.strip()]}


def check_port(port):
    # TensorFlow's server listens on every interface, so test the same bind. SO_REUSEADDR as
    # gRPC sets it: connections of a finished run in TIME_WAIT must not count as "in use".
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", port))
            s.listen()
        return {"ok": True}
    except OSError as err:
        return {"ok": False, "error": f"port {port} is in use ({err.strerror})"}


def check_workdir(path):
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
        return {"ok": True, "path": os.path.abspath(path)}
    except OSError as err:
        return {"ok": False, "error": f"{path} is not writable ({err.strerror})"}


def main(argv):
    port = int(argv[argv.index("--port") + 1])
    workdir = argv[argv.index("--workdir") + 1]
    report = {
        "python": {"ok": sys.version_info >= (3, 9), "version": sys.version.split()[0],
                   "executable": sys.executable},
        "tensorflow": check_tensorflow(),
        "gpus": check_gpus(),
        "port": check_port(port),
        "workdir": check_workdir(workdir),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
