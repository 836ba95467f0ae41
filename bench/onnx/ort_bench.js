#!/usr/bin/env node
// ONNX Runtime (onnxruntime-node, CPU execution provider) timing of an export
// written by bench/onnx/export_onnx.py, for bench/run_all.sh (issue 19).
//
//   node bench/onnx/ort_bench.js --dir EXPORT_DIR [--threads 2] [--repeats 5] [--warmup 3] [--json]
//                                [--int8]
//
// --int8 times model.int8.onnx (bench/onnx/quantize_onnx.py: ORT's dynamic
// quantization, per-channel int8 weights) instead, and checks it against the
// fp32 graph run by ORT on the same inputs (a second session, made and run
// once before the timing): per-sequence argmax agreement of the logits, max
// |int8 - fp32| logit, and the relative L2 error of the last hidden state
// (int8 is not expected within 1e-4 of eager: the harness bounds these).
//
// Session: graph optimisation "all", intraOpNumThreads = --threads (what
// dserve uses), interOpNumThreads 1, sequential execution, CPU memory arena
// and memory patterns on (ORT's defaults otherwise; thread spinning left at
// its default, as a user gets it). First it runs the check inputs (the eager
// timing inputs, check.json) once and compares ORT's logits and
// last_hidden_state with eager PyTorch's fp32 outputs (max |diff|); that run
// is the first of the --warmup untimed runs (every engine of run_all.sh gets
// --warmup untimed forwards before its timed ones; ORT's check run is one of
// them, so ORT gets max(1, warmup) in all); then --repeats timed
// session.run calls on the same inputs. median_s is the median wall time of
// one run (the middle value, the mean of the two middle ones for an even
// count, as everywhere in run_all; inputs already tensors; both outputs
// fetched), as eager_baseline.py's median_s.
// Prints one JSON object (--json) or a line.
// Exit 2 when onnxruntime-node is not installed (run bench/onnx/setup.sh).
"use strict";
const fs = require("fs");
const path = require("path");

function parseArgs(argv) {
  const a = {dir: null, threads: 2, repeats: 5, warmup: 3, json: false, int8: false};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === "--dir") a.dir = v();
    else if (k === "--threads") a.threads = parseInt(v(), 10);
    else if (k === "--repeats") a.repeats = parseInt(v(), 10);
    else if (k === "--warmup") a.warmup = parseInt(v(), 10);
    else if (k === "--json") a.json = true;
    else if (k === "--int8") a.int8 = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.dir) throw new Error("--dir EXPORT_DIR is required");
  return a;
}

function loadOrt() {
  try {
    // bench/onnx/node_modules (setup.sh) first, then node's own search path.
    return {ort: require(path.join(__dirname, "node_modules", "onnxruntime-node")),
            version: require(path.join(__dirname, "node_modules", "onnxruntime-node", "package.json")).version};
  } catch (e) {
    try {
      return {ort: require("onnxruntime-node"), version: require("onnxruntime-node/package.json").version};
    } catch (e2) {
      process.stderr.write(`ort_bench: onnxruntime-node is not installed (run bench/onnx/setup.sh): ${e.message}\n`);
      process.exit(2);
    }
  }
}

function maxAbsDiff(a, b) {
  if (a.length !== b.length) throw new Error(`size mismatch ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as NaN
  }
  return m;
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const {ort, version} = loadOrt();
  const check = JSON.parse(fs.readFileSync(path.join(a.dir, "check.json"), "utf8"));
  const [B, L] = [check.batch, check.length];
  const flat = (rows) => BigInt64Array.from(rows.flat().map((x) => BigInt(x)));
  const feeds = {
    input_ids: new ort.Tensor("int64", flat(check.input_ids), [B, L]),
    attention_mask: new ort.Tensor("int64", flat(check.attention_mask), [B, L]),
  };
  const opts = {
    executionProviders: ["cpu"], graphOptimizationLevel: "all", intraOpNumThreads: a.threads,
    interOpNumThreads: 1, executionMode: "sequential", enableCpuMemArena: true, enableMemPattern: true,
  };
  let ref = null;  // --int8: the fp32 graph's outputs through ORT, the int8 graph's reference
  if (a.int8) {
    const fp32 = await ort.InferenceSession.create(path.join(a.dir, "model.onnx"), opts);
    const o = await fp32.run(feeds);
    ref = {logits: Float32Array.from(o.logits.data), hidden: Float32Array.from(o.last_hidden_state.data)};
    if (fp32.release) await fp32.release();
  }
  const modelFile = a.int8 ? "model.int8.onnx" : "model.onnx";
  let t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(path.join(a.dir, modelFile), opts);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;

  const out = await session.run(feeds);
  const hidRef = fs.readFileSync(path.join(a.dir, check.hidden_file));
  const hidden = new Float32Array(hidRef.buffer, hidRef.byteOffset, hidRef.byteLength / 4);
  const diffLogits = maxAbsDiff(out.logits.data, check.logits.flat());
  const diffHidden = maxAbsDiff(out.last_hidden_state.data, hidden);
  let maxLogit = 0;
  for (const x of check.logits.flat()) maxLogit = Math.max(maxLogit, Math.abs(x));

  let vsFp32 = null;
  if (ref) {
    const labels = check.logits[0].length;
    let agree = 0;
    const argmax = (v, r) => {
      let best = 0;
      for (let j = 1; j < labels; j++) if (v[r * labels + j] > v[r * labels + best]) best = j;
      return best;
    };
    for (let r = 0; r < B; r++) agree += argmax(out.logits.data, r) === argmax(ref.logits, r) ? 1 : 0;
    let num = 0, den = 0;
    for (let i = 0; i < ref.hidden.length; i++) {
      const d = out.last_hidden_state.data[i] - ref.hidden[i];
      num += d * d;
      den += ref.hidden[i] * ref.hidden[i];
    }
    vsFp32 = {argmax_agree: agree, sequences: B, max_abs_diff_logits: maxAbsDiff(out.logits.data, ref.logits),
              hidden_rel_l2: Math.sqrt(num / Math.max(den, 1e-30))};
  }
  for (let i = 1; i < a.warmup; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < a.repeats; i++) {
    t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const r = {
    engine: "onnxruntime-node", ort_version: version, execution_provider: "cpu", graph_optimization: "all",
    threads: a.threads, batch: B, length: L, dtype: a.int8 ? "int8" : "fp32", model_file: modelFile,
    opset: check.opset, shapes: check.shapes, median_s: median(times), min_s: Math.min(...times), times_s: times,
    repeats: a.repeats, warmup: Math.max(1, a.warmup), load_s: loadS, vs_fp32_graph: vsFp32,
    max_abs_diff_logits: diffLogits, max_abs_diff_hidden: diffHidden, max_abs_logit: maxLogit,
    model: check.model_name,
  };
  if (a.json) {
    console.log(JSON.stringify(r));
  } else {
    console.log(`ORT ${version} ${B}x${L} ${r.dtype}, ${a.threads} threads: median ${r.median_s.toFixed(4)} s ` +
                `(min ${r.min_s.toFixed(4)}) over ${a.repeats}; vs eager max |diff| logits ${diffLogits.toExponential(2)}, ` +
                `hidden ${diffHidden.toExponential(2)}; session load ${loadS.toFixed(1)} s` +
                (vsFp32 ? `; vs the fp32 graph: argmax ${vsFp32.argmax_agree}/${B}, max |diff| logits ` +
                          `${vsFp32.max_abs_diff_logits.toExponential(2)}, hidden rel L2 ${vsFp32.hidden_rel_l2.toExponential(2)}`
                        : ""));
  }
}

main().catch((e) => {
  process.stderr.write(`ort_bench: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
