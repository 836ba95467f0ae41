#!/usr/bin/python3
"""Dynamic int8 quantization of an fp32 ONNX graph, written the way ONNX
Runtime's own quantizer (onnxruntime.quantization.quantize_dynamic,
QOperator format, per_channel=True, weight_type QInt8) writes it, with
Debian's python3-onnx only (ORT's Python package is not installable here):
the int8 peer of `dserve ... --dtype int8` for bench/run_all.sh (issue 27).

Every MatMul whose second input is a constant 2-D weight [K, N] and whose
first input is computed at run time (the dense layers: query/key/value or
in_proj, attention output, intermediate, output) becomes

  DynamicQuantizeLinear(A) -> A_q (uint8), A_scale, A_zero_point
      (once per activation tensor: q, k and v share their input's)
  MatMulInteger(A_q, W_q, A_zero_point, W_zero_point) -> int32
  Cast(float) ; Mul(A_scale, W_scale) ; Mul -> the MatMul's output

with W_q int8 symmetric per output column (W_scale[n] = max_k |W[k, n]| /
127, zero points 0, values in [-127, 127]), as ORT's quantizer does for a
MatMul with per_channel=True. The bias Add after it stays in float, as
ORT's quantizer leaves it. At graph optimisation level "all" ORT itself
fuses this pattern into its com.microsoft DynamicQuantizeMatMul kernel
(MatMulIntegerToFloat fusion). --fused writes DynamicQuantizeMatMul
directly instead (bias folded in when the MatMul feeds one Add of a
constant [N] vector). MatMuls of two constants (the relative-position
projections, which ORT constant-folds at load) and Gemm nodes (the pooler
and classifier, which quantize_dynamic leaves in float) stay fp32; so do the
embedding tables (quantize_dynamic would also quantize a Gather's table: it
is a lookup, not a GEMM, and dserve keeps its tables in float too).

With --reduce-range the weights use 7 bits ([-64, 64], scale max |W| / 64),
as quantize_dynamic(reduce_range=True) writes them: ORT's advice for CPUs
with no VNNI (bench/run_all.sh passes it there).

usage: quantize_onnx.py IN.onnx OUT.onnx [--fused] [--reduce-range]
Prints one JSON object: {"matmuls_quantized", "matmuls_left", "format", ...}.
"""
import argparse
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"


def constant_tensors(graph):
    """Names of the tensors known before run time: initializers, Constant outputs, and outputs of nodes
    whose inputs all are (what ORT's constant folding would fold)."""
    const = {t.name for t in graph.initializer}
    for node in graph.node:  # nodes are in topological order
        if node.op_type == "Constant" or (node.input and all(i in const or i == "" for i in node.input)):
            const.update(node.output)
    return const


def weight_qmax(reduce_range):
    """The largest |W_q|: 127, or 64 with reduce_range (ORT's quantizer: int8 weights in [-64, 64], 7 bits, its
    advice for CPUs with no VNNI, where MLAS's u8 x s8 AVX2 kernels add pairs of products in saturating int16:
    255 * 127 * 2 overflows 32767, 255 * 64 * 2 does not)."""
    return 64 if reduce_range else 127


def quantize_weight(w, reduce_range=False):
    """Symmetric int8 per output column of a [K, N] weight: (int8 [K, N], float scale [N])."""
    qmax = weight_qmax(reduce_range)
    absmax = np.abs(w).max(axis=0).astype(np.float32)
    scale = np.where(absmax > 0, absmax / float(qmax), 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -qmax, qmax).astype(np.int8)
    return q, scale


def quantize_model(model, fused=False, reduce_range=False):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    const = constant_tensors(g)
    consumers = {}
    for node in g.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    new_nodes, new_inits, dropped = [], [], set()
    dq = {}  # activation name -> (A_q, A_scale, A_zero_point)
    n_q, left, skip_add = 0, [], set()
    for node in g.node:
        if id(node) in skip_add:
            continue
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if w is None or len(w.dims) != 2 or node.input[0] in const or w.data_type != TensorProto.FLOAT:
            if node.op_type in ("MatMul", "Gemm"):
                left.append(f"{node.op_type} {node.name}")
            new_nodes.append(node)
            continue
        a, out, base = node.input[0], node.output[0], node.name or node.output[0]
        wq, scale = quantize_weight(numpy_helper.to_array(w), reduce_range)
        names = {k: f"{w.name}_{k}" for k in ("quantized", "scale", "zero_point")}
        new_inits += [numpy_helper.from_array(wq, names["quantized"]),
                      numpy_helper.from_array(scale, names["scale"]),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), names["zero_point"])]
        dropped.add(w.name)
        n_q += 1
        if fused:
            users = consumers.get(out, [])
            bias = ""
            if len(users) == 1 and users[0].op_type == "Add" and out not in [o.name for o in g.output]:
                add = users[0]
                other = add.input[1] if add.input[0] == out else add.input[0]
                b = inits.get(other)
                if b is not None and list(b.dims) == [wq.shape[1]]:
                    bias, out = other, add.output[0]
                    skip_add.add(id(add))
            new_nodes.append(helper.make_node("DynamicQuantizeMatMul",
                                              [a, names["quantized"], names["scale"], names["zero_point"], bias],
                                              [out], name=base + "_quant", domain=MS_DOMAIN))
            continue
        if a not in dq:
            dq[a] = (f"{a}_quantized", f"{a}_scale", f"{a}_zero_point")
            new_nodes.append(helper.make_node("DynamicQuantizeLinear", [a], list(dq[a]), name=f"{a}_QuantizeLinear"))
        aq, ascale, azp = dq[a]
        new_nodes += [
            helper.make_node("MatMulInteger", [aq, names["quantized"], azp, names["zero_point"]],
                             [out + "_output_quantized"], name=base + "_quant"),
            helper.make_node("Cast", [out + "_output_quantized"], [out + "_output_quantized_cast_output"],
                             to=TensorProto.FLOAT, name=base + "_quant_output_quantized_cast"),
            helper.make_node("Mul", [ascale, names["scale"]], [base + "_quant_scales_mul:0"],
                             name=base + "_quant_scales_mul"),
            helper.make_node("Mul", [out + "_output_quantized_cast_output", base + "_quant_scales_mul:0"], [out],
                             name=base + "_quant_output_scale_mul"),
        ]
    still_used = {i for n in new_nodes for i in n.input}
    keep = [t for t in g.initializer if t.name not in dropped or t.name in still_used]
    del g.node[:]
    g.node.extend(new_nodes)
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    if fused and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return {"matmuls_quantized": n_q, "matmuls_left": left, "activations_quantized": len(dq),
            "format": "DynamicQuantizeMatMul (com.microsoft)" if fused else
            "QOperator: DynamicQuantizeLinear + MatMulInteger + Cast + scale Mul (bias Add in float)",
            "weights": f"int8 symmetric per output channel, zero points 0, values in [-{weight_qmax(reduce_range)}, "
                       f"{weight_qmax(reduce_range)}]" + (" (reduce_range)" if reduce_range else ""),
            "reduce_range": reduce_range, "activations": "uint8 asymmetric, per tensor"}


def quantize_file(src, dst, fused=False, reduce_range=False):
    model = onnx.load(src)
    info = quantize_model(model, fused, reduce_range)
    if not fused:
        onnx.checker.check_model(model)
    onnx.save(model, dst)
    info.update(onnx_version=onnx.__version__, source=src)
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--fused", action="store_true", help="com.microsoft DynamicQuantizeMatMul per MatMul")
    ap.add_argument("--reduce-range", action="store_true",
                    help="weights in 7 bits ([-64, 64]), as ORT's quantize_dynamic(reduce_range=True) for CPUs without VNNI")
    a = ap.parse_args(argv)
    print(json.dumps(quantize_file(a.src, a.dst, a.fused, a.reduce_range)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
