"""Preflight probe, run on each host before a launch. Standard library only.

The launcher sends this file's source as ``python -c SOURCE --port P --workdir D --peers JSON`` so
it works before anything has been copied to the host. It prints one JSON object as its last line.
One probe serves every task of a host: ``--port`` and ``--workdir`` may repeat, and
``ports`` and ``workdirs`` answer each (``port`` and ``workdir``: the first one's).

``--peers`` lists (name, TF_CONFIG address) pairs: the workers dial those, not the console, so
each one is checked from here (a name lookup, then a TCP connect to its port: "refused" is fine
before launch, it proves a live host answered; silence or "no route" is not). The console sends
one per peer host, not one per task; ``peers.failed`` names each that failed.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

PEER_TIMEOUT_S = 3.0
ADDRESS_FIX = ("set a HostName the workers can resolve in ~/.ssh/config, or the task's address "
               "(Cluster page, address column) to a name or IP they can reach")


# The names TensorFlow is published under; the first one installed gives the version.
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                    "tensorflow-macos", "tf-nightly")


def _installed(name):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_tensorflow():
    # From the installed packages' metadata, without importing TensorFlow: the import costs
    # seconds of CPU per host, and the launch right after imports it anyway (a broken install
    # then fails its task at start, and the task's diagnosis says why).
    from importlib import util
    if util.find_spec("tensorflow") is None:
        return {"ok": False, "error": "tensorflow is not installed for this Python (pip install tensorflow)"}
    tf_version = next(filter(None, map(_installed, TF_DISTRIBUTIONS)), None)
    keras_version = _installed("keras")
    if tf_version is None:
        return {"ok": False, "error": "tensorflow is importable but not installed as a package "
                                     "(no version on record); install it with pip"}
    if keras_version is None:
        return {"ok": False, "error": "keras is not installed for this Python (pip install keras)"}
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


def reach_peer(name, address):
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        return f"{name} at {address}: the name does not resolve here ({err.strerror}); {ADDRESS_FIX}"
    try:
        with socket.create_connection((host, int(port)), timeout=PEER_TIMEOUT_S):
            return None
    except ConnectionRefusedError:
        return None   # the host answered; nothing listens yet, as expected before the launch
    except OSError as err:
        why = "no answer" if isinstance(err, socket.timeout) else (err.strerror or str(err))
        return (f"{name} at {address}: {why} within {PEER_TIMEOUT_S:g} s; open the port between "
                f"the workers, or {ADDRESS_FIX}")


def check_peers(peers):
    if not peers:
        return {"ok": True, "peers": 0, "failed": {}}
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as ex:
        found = list(ex.map(lambda pa: reach_peer(*pa), peers))
    failed = {name: problem for (name, _), problem in zip(peers, found) if problem}
    if failed:
        return {"ok": False, "error": "cannot reach " + " | ".join(failed.values()), "failed": failed}
    return {"ok": True, "peers": len(peers), "failed": {}}


def _every(argv, flag):
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def main(argv):
    ports = [int(p) for p in _every(argv, "--port")]
    workdirs = _every(argv, "--workdir")
    peers = json.loads(argv[argv.index("--peers") + 1]) if "--peers" in argv else []
    wanted = json.loads(argv[argv.index("--packages") + 1]) if "--packages" in argv else []
    by_port = {str(port): check_port(port) for port in ports}
    by_workdir = {path: check_workdir(path) for path in workdirs}
    report = {
        "python": {"ok": sys.version_info >= (3, 9), "version": sys.version.split()[0],
                   "executable": sys.executable},
        "tensorflow": check_tensorflow(),
        "gpus": check_gpus(),
        "port": by_port[str(ports[0])],
        "workdir": by_workdir[workdirs[0]],
        "ports": by_port,
        "workdirs": by_workdir,
        "peers": check_peers(peers),
        # The project's requirements: each distribution's installed version (None: missing);
        # the console compares them with the versions asked for (backend/hosts/preflight.py).
        "packages": {"ok": True, "installed": {name: _installed(name) for name in wanted}},
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
