"""Finds and imports the generated gRPC stubs.

Looked for, in order: the folder named by the DSERVE_PYTHON_STUBS environment
variable, then `_stubs/` next to this package (what generate_stubs.sh writes
by default). Each must hold dserve/v1/inference_pb2{,_grpc}.py and
dserve_health/health_pb2{,_grpc}.py.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def stub_dirs():
    dirs = []
    env = os.environ.get("DSERVE_PYTHON_STUBS")
    if env:
        dirs.append(env)
    dirs.append(os.path.join(_HERE, "_stubs"))
    return dirs


def _find():
    for d in stub_dirs():
        if os.path.exists(os.path.join(d, "dserve", "v1", "inference_pb2_grpc.py")):
            return d
    raise ImportError(
        "dserve_client: no generated stubs found in %s; run client/python/generate_stubs.sh "
        "(optionally with an output folder, then set DSERVE_PYTHON_STUBS to it)" % " or ".join(stub_dirs()))


STUBS_DIR = _find()
if STUBS_DIR not in sys.path:
    sys.path.insert(0, STUBS_DIR)

from dserve.v1 import inference_pb2  # noqa: E402,F401
from dserve.v1 import inference_pb2_grpc  # noqa: E402,F401

try:  # grpcio-health-checking, when installed, already registers grpc.health.v1.
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: F401
except ImportError:
    from dserve_health import health_pb2, health_pb2_grpc  # noqa: E402,F401
