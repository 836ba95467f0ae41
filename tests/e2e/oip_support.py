"""Pieces of the Open Inference Protocol e2e tests (issue 28).

- The OIP client stubs: generated at build time with grpc_python_plugin from
  tests/oip/*.proto, a copy of the protocol's published proto written
  independently of the server's proto/inference/ (tests/e2e/CMakeLists.txt).
- Tensor helpers: building BYTES inputs (typed contents or raw), encoding and
  decoding the raw / binary tensor data (4-byte little-endian lengths,
  little-endian numbers), built byte by byte here with struct, not by any
  OIP client library.
"""
import os
import struct
import sys

import numpy as np

import e2e_support as e2e

sys.path.insert(0, os.path.join(e2e.STUBS, "oip"))
import grpc_service_pb2 as oip  # noqa: E402
import grpc_service_pb2_grpc as oip_grpc  # noqa: E402
import model_config_pb2 as oip_config  # noqa: E402

TEXTS = [
    "I was charged twice for my order, please refund me.",
    "How do I reset my password?",
    "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u6771\u4eac and an emoji \U0001F642!",
]
PAIRS = ["Please refund the second charge.", "I forgot it again.", "\u00bfQu\u00e9 tal?"]
QUESTION = "When does the miller open the doors?"
CONTEXTS = [
    "A river runs past the old mill, and the miller still opens the doors every morning at six.",
    "The bakery on the square sells bread \u2014 fresh rolls and caf\u00e9 au lait \u2615 from seven o'clock.",
]
QUERY = "where can I buy fresh bread"
DOCUMENTS = [
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "Engineers measure things carefully before they build anything.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "\u00dcber caf\u00e9s: fresh croissants every morning \u2615",
]
BAD_UTF8 = b"ab\xff\xfe\xc3("


def stub(server, channel=None):
    return oip_grpc.GRPCInferenceServiceStub(channel or server.channel())


def encode_bytes(elements):
    """Raw BYTES data: each element a 4-byte little-endian length, then its bytes."""
    out = b""
    for e in elements:
        b = e.encode("utf-8") if isinstance(e, str) else e
        out += struct.pack("<I", len(b)) + b
    return out


def decode_bytes(raw):
    out, pos = [], 0
    while pos < len(raw):
        (n,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        out.append(raw[pos:pos + n])
        pos += n
    assert pos == len(raw), "trailing bytes in raw BYTES data"
    return out


def decode_raw(datatype, raw):
    if datatype == "BYTES":
        return [b.decode("utf-8") for b in decode_bytes(raw)]
    if datatype == "FP32":
        return [float(v) for v in struct.unpack("<%df" % (len(raw) // 4), raw)]
    if datatype == "INT64":
        return list(struct.unpack("<%dq" % (len(raw) // 8), raw))
    if datatype == "BOOL":
        return [b != 0 for b in raw]
    raise ValueError(datatype)


def infer_request(model, tensors, raw=False, outputs=(), parameters=None, request_id=""):
    """A ModelInferRequest of BYTES `tensors` [(name, [str|bytes], shape)]."""
    r = oip.ModelInferRequest(model_name=model, id=request_id)
    for name, values, shape in tensors:
        t = r.inputs.add(name=name, datatype="BYTES", shape=list(shape))
        data = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
        if raw:
            r.raw_input_contents.append(encode_bytes(data))
        else:
            t.contents.bytes_contents.extend(data)
    for o in outputs:
        r.outputs.add(name=o)
    for key, value in (parameters or {}).items():
        p = r.parameters[key]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        else:
            p.string_param = value
    return r


def outputs_of(response):
    """{name: (datatype, shape, values)} of a ModelInferResponse, typed or raw."""
    out = {}
    raw = list(response.raw_output_contents)
    for i, o in enumerate(response.outputs):
        if raw:
            values = decode_raw(o.datatype, raw[i])
        else:
            c = o.contents
            values = {"BYTES": [b.decode("utf-8") for b in c.bytes_contents], "FP32": list(c.fp32_contents),
                      "INT64": list(c.int64_contents), "BOOL": list(c.bool_contents)}[o.datatype]
        out[o.name] = (o.datatype, list(o.shape), values)
    return out


def f32(x):
    return np.float32(x)
