#!/usr/bin/env python3
"""pytorch_model.bin checkpoints (issue 18) through the real binary.

Twins of the golden checkpoints (shared/goldens, both families) are written
here with Debian's python3-torch: the same tensors, `torch.save`d as an
OrderedDict with `_metadata`, as `model.state_dict()` is. `dserve forward`
on a twin must print exactly what it prints on the safetensors original,
and the golden values must hold; the legacy (non-zip) format, fp16/bf16
storage, shards (pytorch_model.bin.index.json) and `dserve convert` are
checked the same way. Damaged files (truncated, garbage, a missing tensor,
a wrong shape, a pickle that is not a state_dict) fail like damaged
safetensors do: exit 2 and one line naming the file and the problem, for
forward, eval, serve and train --init. `train --init` on a .bin-only
directory trains. (Serving a twin next to its original:
pytorch_bin_serve_test.py.)

usage: pytorch_bin_test.py DSERVE_BINARY SHARED_DIR   (run with /usr/bin/python3)
"""
import collections
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import torch

BINARY = None
SHARED = None
TOL = 1e-4
GOLDENS = ("cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm", "albert/albert_cls", "albert/albert_qa")
CRASH_SIGNS = ("Segmentation fault", "terminate called", "Aborted", "core dumped", "AddressSanitizer",
               "runtime error:")
ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")

# ------------------------------------------------------------- safetensors --

ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
             "BOOL": torch.bool}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}


def read_safetensors(path):
    """{name: (dtype name, shape, raw bytes)} and the metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[8 + n + begin:8 + n + end])
    return out, meta


def load_tensors(path):
    """An OrderedDict of torch tensors, in file order, as a state_dict would hold them."""
    raw, _ = read_safetensors(path)
    sd = collections.OrderedDict()
    for name, (dtype, shape, blob) in raw.items():
        t = torch.frombuffer(bytearray(blob), dtype=ST_DTYPES[dtype]) if blob else torch.empty(0, dtype=ST_DTYPES[dtype])
        sd[name] = t.reshape(shape).clone()
    sd._metadata = collections.OrderedDict({"": {"version": 1}})
    return sd


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ------------------------------------------------------------------ twins --

def golden_dir(name):
    return os.path.join(SHARED, "goldens", name if "/" in name else os.path.join("model", name))


def copy_non_weights(src, dst):
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f not in ("model.safetensors", "golden.json") and os.path.isfile(os.path.join(src, f)):
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))


def make_twin(src, dst, legacy=False, edit=None):
    """`dst`: src's files with model.safetensors replaced by pytorch_model.bin."""
    copy_non_weights(src, dst)
    sd = load_tensors(os.path.join(src, "model.safetensors"))
    if edit:
        edit(sd)
    torch.save(sd, os.path.join(dst, "pytorch_model.bin"), _use_new_zipfile_serialization=not legacy)
    return dst


def run(*args, stdin=""):
    return subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True, timeout=180, env=ENV)


def golden_lines(name):
    with open(os.path.join(golden_dir(name), "golden.json")) as f:
        golden = json.load(f)
    lines = [{k: c[k] for k in ("input_ids", "token_type_ids") if k in c} for c in golden["cases"]]
    return golden, "".join(json.dumps(l) + "\n" for l in lines)


def forward(model_dir, stdin, *flags):
    result = run("forward", "--model", model_dir, "--hidden", "--batch-size", "3", *flags, stdin=stdin)
    return result


def max_abs_diff(a, b):
    if isinstance(a, list):
        assert len(a) == len(b), (len(a), len(b))
        return max([max_abs_diff(x, y) for x, y in zip(a, b)] or [0.0])
    return abs(a - b)


class PytorchBin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pytorch_bin_test-")
        cls.spm = os.path.join(SHARED, "goldens", "tokenizer", "spm.model")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dir(self, name):
        path = os.path.join(self.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def assert_same_forward(self, original, twin, name):
        golden, stdin = golden_lines(name)
        want = forward(original, stdin)
        got = forward(twin, stdin)
        self.assertEqual(want.returncode, 0, want.stderr)
        self.assertEqual(got.returncode, 0, got.stderr)
        self.assertEqual(got.stdout, want.stdout, "%s: the twin's outputs differ from the safetensors original" % name)
        return golden, got.stdout

    # ------------------------------------------------------------- loading --

    def test_zip_twins_of_every_golden_give_identical_outputs(self):
        for name in GOLDENS:
            with self.subTest(golden=name):
                twin = make_twin(golden_dir(name), self.dir("twin-" + name.replace("/", "-")))
                self.assertFalse(os.path.exists(os.path.join(twin, "model.safetensors")))
                golden, stdout = self.assert_same_forward(golden_dir(name), twin, name)
                outputs = [json.loads(l) for l in stdout.splitlines()]
                compared = 0
                for case, out in zip(golden["cases"], outputs):
                    for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
                        if key in case:
                            diff = max_abs_diff(out[key], case[key])
                            self.assertLessEqual(diff, TOL, "%s %s %s: %g" % (name, case["desc"], key, diff))
                            compared += 1
                self.assertGreaterEqual(compared, len(golden["cases"]))

    def test_legacy_format_gives_identical_outputs(self):
        for name in ("cls_factorized", "albert/albert_qa"):
            with self.subTest(golden=name):
                twin = make_twin(golden_dir(name), self.dir("legacy-" + name.replace("/", "-")), legacy=True)
                with open(os.path.join(twin, "pytorch_model.bin"), "rb") as f:
                    self.assertNotEqual(f.read(2), b"PK", "a legacy file is not a zip archive")
                self.assert_same_forward(golden_dir(name), twin, name)

    def test_fp16_and_bf16_storage_convert_as_safetensors_does(self):
        for dtype in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=str(dtype)):
                sd = load_tensors(os.path.join(golden_dir("cls_factorized"), "model.safetensors"))
                low = collections.OrderedDict((k, v.to(dtype)) for k, v in sd.items())
                st = self.dir("st-%s" % dtype)
                copy_non_weights(golden_dir("cls_factorized"), st)
                write_safetensors(os.path.join(st, "model.safetensors"), low)
                twin = self.dir("bin-%s" % dtype)
                copy_non_weights(golden_dir("cls_factorized"), twin)
                torch.save(low, os.path.join(twin, "pytorch_model.bin"))
                self.assert_same_forward(st, twin, "cls_factorized")

    def test_views_and_shared_storage_read_as_their_values(self):
        """Tied weights share a storage; a transposed tensor is a strided view of a contiguous one."""
        def edit(sd):
            name = "classifier.weight"
            w = sd[name].clone()
            sd[name] = w.t().contiguous().t()  # same values, column-major strides
            sd["deberta.embeddings.word_embeddings.weight"] = sd["deberta.embeddings.word_embeddings.weight"]
            sd["lm_tied_copy.weight"] = sd["deberta.embeddings.word_embeddings.weight"]  # shares the storage
        twin = make_twin(golden_dir("cls_factorized"), self.dir("views"), edit=edit)
        loaded = torch.load(os.path.join(twin, "pytorch_model.bin"))
        self.assertFalse(loaded["classifier.weight"].is_contiguous())
        self.assert_same_forward(golden_dir("cls_factorized"), twin, "cls_factorized")

    def test_sharded_index(self):
        twin = self.dir("sharded")
        copy_non_weights(golden_dir("qa_c2p_only"), twin)
        sd = load_tensors(os.path.join(golden_dir("qa_c2p_only"), "model.safetensors"))
        names = list(sd)
        shards = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
                  "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
        weight_map = {}
        for shard, keys in shards.items():
            torch.save(collections.OrderedDict((k, sd[k]) for k in keys), os.path.join(twin, shard))
            weight_map.update({k: shard for k in keys})
        with open(os.path.join(twin, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        self.assert_same_forward(golden_dir("qa_c2p_only"), twin, "qa_c2p_only")

    def test_safetensors_is_preferred_when_both_exist(self):
        both = self.dir("both")
        copy_non_weights(golden_dir("cls_factorized"), both)
        shutil.copyfile(os.path.join(golden_dir("cls_factorized"), "model.safetensors"),
                        os.path.join(both, "model.safetensors"))
        with open(os.path.join(both, "pytorch_model.bin"), "wb") as f:
            f.write(b"not read")
        self.assert_same_forward(golden_dir("cls_factorized"), both, "cls_factorized")

    # ------------------------------------------------------------- convert --

    def test_convert_writes_the_same_tensors_as_safetensors(self):
        for name, legacy in (("cls_factorized", False), ("albert/albert_cls", True)):
            with self.subTest(golden=name, legacy=legacy):
                src = golden_dir(name)
                twin = make_twin(src, self.dir("conv-src-" + name.replace("/", "-")), legacy=legacy)
                shutil.copyfile(self.spm, os.path.join(twin, "spm.model"))
                out = self.dir("conv-out-" + name.replace("/", "-"))
                result = run("convert", "--model", twin, "--out", out)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("model.safetensors", result.stdout)
                self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors", "spm.model"])
                for f in ("config.json", "spm.model"):
                    with open(os.path.join(twin, f), "rb") as a, open(os.path.join(out, f), "rb") as b:
                        self.assertEqual(a.read(), b.read(), f + " is copied byte for byte")
                want, _ = read_safetensors(os.path.join(src, "model.safetensors"))
                got, meta = read_safetensors(os.path.join(out, "model.safetensors"))
                self.assertEqual(meta, {"format": "pt"})
                self.assertEqual(got, want, "same names, dtypes, shapes and bytes")
                self.assert_same_forward(src, out, name)
        again = run("convert", "--model", twin, "--out", out)
        self.assertEqual(again.returncode, 1)
        self.assertIn("exists", again.stderr)

    def test_convert_of_a_damaged_bin_exits_2_and_writes_nothing(self):
        twin = make_twin(golden_dir("cls_factorized"), self.dir("conv-bad"))
        path = os.path.join(twin, "pytorch_model.bin")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        out = self.dir("conv-bad-out")
        result = run("convert", "--model", twin, "--out", out)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(path, result.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("conv-bad-out")], [])

    # -------------------------------------------------------------- errors --

    def damaged(self):
        """{kind: (dir, file the message must name, words it must hold)} of broken .bin checkpoints."""
        src = golden_dir("cls_factorized")
        variants = {}

        def variant(kind, needles, legacy=False, edit=None, write=None):
            d = make_twin(src, self.dir("bad-" + kind), legacy=legacy, edit=edit)
            shutil.copyfile(self.spm, os.path.join(d, "spm.model"))
            path = os.path.join(d, "pytorch_model.bin")
            if write:
                write(path)
            variants[kind] = (d, path, needles)

        def truncate(path):
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) * 2 // 3)

        def garbage(path):
            with open(path, "wb") as f:
                f.write(os.urandom(4096))

        def save(obj):
            return lambda path: torch.save(obj, path)

        def break_directory(path):
            # The zip's end-of-central-directory record (its last 22 bytes) zeroed.
            # (Flipped bytes inside a storage go unnoticed, as in safetensors:
            # LibTorch's zip reader skips the CRC check.)
            with open(path, "r+b") as f:
                f.seek(-22, 2)
                f.write(bytes(22))

        missing = "deberta.encoder.layer.1.attention.self.query_proj.weight"
        variant("truncated_zip", ["corrupt zip archive"], write=truncate)
        variant("truncated_legacy", ["truncated"], legacy=True, write=truncate)
        variant("garbage", ["not a torch.save file"], write=garbage)
        variant("zip_directory", ["corrupt zip archive"], write=break_directory)
        variant("missing_tensor", ["missing tensor", "query_proj.weight"], edit=lambda sd: sd.pop(missing))
        variant("wrong_shape", ["deberta.encoder.layer.0.intermediate.dense.weight", "has shape [100, 96]"],
                edit=lambda sd: sd.__setitem__("deberta.encoder.layer.0.intermediate.dense.weight",
                                               torch.zeros(100, 96)))
        variant("list_pickle", ["holds a list, not a state_dict"], write=save([torch.ones(2)]))
        variant("non_tensor_entry", ["entry 'step' is an int, not a tensor"],
                write=save(collections.OrderedDict(step=3, w=torch.ones(2))))
        variant("module_pickle", ["not a state_dict", "torch.nn.modules.linear.Linear"],
                write=save(torch.nn.Linear(2, 2)))
        return variants

    def assert_fails_naming(self, command, result, path, needles):
        message = result.stderr
        self.assertEqual(result.returncode, 2, "%s: exit %d\n%s" % (command, result.returncode, message))
        for sign in CRASH_SIGNS:
            self.assertNotIn(sign, message)
        self.assertIn(path, message, "the message names the file")
        for needle in needles:
            self.assertIn(needle, message)
        lines = [l for l in message.splitlines() if l.startswith("dserve %s:" % command)]
        self.assertEqual(len(lines), 1, message)

    def test_damaged_files_fail_like_damaged_safetensors(self):
        variants = self.damaged()
        data = os.path.join(self.tmp, "intents.jsonl")
        with open(data, "w") as f:
            for text, label in (("please refund my order", "refund"), ("where is my parcel", "shipping")):
                f.write(json.dumps({"text": text, "label": label}) + "\n")
        for kind, (d, path, needles) in variants.items():
            with self.subTest(kind=kind):
                result = run("forward", "--model", d, stdin='{"input_ids": [1, 5, 2]}\n')
                print("\n  %s: %s" % (kind, result.stderr.strip()), end="", flush=True)
                self.assert_fails_naming("forward", result, path, needles)
                self.assert_fails_naming("eval", run("eval", "--model", d, "--data", data), path, needles)
                out = os.path.join(self.tmp, "train-" + kind)
                self.assert_fails_naming("train", run("train", "--task", "classify", "--init", d, "--train", data,
                                                      "--out", out, "--max-steps", "1", "--threads", "1"),
                                         path, needles)
                self.assertFalse(os.path.exists(os.path.join(out, "best")))
                self.assert_fails_naming("serve", run("serve", "--model", "m=" + d, "--listen", "127.0.0.1:0",
                                                      "--metrics-listen", ""), path, needles)

    # --------------------------------------------------------------- train --

    def test_train_init_and_eval_from_a_bin_only_directory(self):
        twin = make_twin(golden_dir("cls_factorized"), self.dir("train-src"))
        shutil.copyfile(self.spm, os.path.join(twin, "spm.model"))
        data = os.path.join(self.tmp, "train.jsonl")
        with open(data, "w") as f:
            for text, label in (("please refund my order", "refund"), ("I forgot my password", "password_reset"),
                                ("where is my parcel", "shipping"), ("my invoice is wrong", "billing")) * 4:
                f.write(json.dumps({"text": text, "label": label}) + "\n")
        ev = run("eval", "--model", twin, "--data", data)
        self.assertEqual(ev.returncode, 0, ev.stderr)
        self.assertIn("accuracy", json.loads(ev.stdout))
        out = self.dir("train-out")
        tr = run("train", "--task", "classify", "--init", twin, "--train", data, "--out", out, "--max-steps", "3",
                 "--batch-size", "4", "--threads", "1")
        self.assertEqual(tr.returncode, 0, tr.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "best", "model.safetensors")))
        trained, _ = read_safetensors(os.path.join(out, "best", "model.safetensors"))
        start, _ = read_safetensors(os.path.join(golden_dir("cls_factorized"), "model.safetensors"))
        self.assertIn("deberta.encoder.layer.0.attention.self.query_proj.weight", trained)
        self.assertNotEqual(trained["classifier.weight"][2], start["classifier.weight"][2], "three steps moved it")


if __name__ == "__main__":
    BINARY, SHARED = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
