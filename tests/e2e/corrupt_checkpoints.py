"""Corrupt and inconsistent variants of a good tiny checkpoint, one per kind
of damage issue 8 lists, shared by every test that loads checkpoints
(`serve`, `forward`, `eval`, `train --init`, hot reload).

Each variant is a copy of the classify test model (tests/data/
make_test_models.py) with one thing broken. `VARIANTS` maps a kind to
(file, needles, edit): `file` is the checkpoint file the error must name,
`needles` the words that must appear in the message (the problem), and
`edit(dir)` breaks the copy in place.

The safetensors edits keep the rest of the file valid (the header is
re-serialised, the data re-packed), so each variant breaks exactly one
thing.
"""
import json
import os
import shutil
import struct

import e2e_support as e2e

SAFETENSORS = "model.safetensors"
CONFIG = "config.json"
SPM = "spm.model"


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def tensors(header):
    """Tensor names sorted by their data offset."""
    names = [k for k in header if k != "__metadata__"]
    return sorted(names, key=lambda k: header[k]["data_offsets"][0])


def repack(header, data, drop=()):
    """header and data without the tensors in `drop`, the rest packed in order."""
    out_header, out_data = {}, b""
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    for name in tensors(header):
        if name in drop:
            continue
        begin, end = header[name]["data_offsets"]
        entry = dict(header[name])
        entry["data_offsets"] = [len(out_data), len(out_data) + end - begin]
        out_header[name] = entry
        out_data += data[begin:end]
    return out_header, out_data


def edit_safetensors(d, change):
    path = os.path.join(d, SAFETENSORS)
    header, data = read_safetensors(path)
    header, data = change(header, data)
    write_safetensors(path, header, data)


def edit_config(d, change):
    path = os.path.join(d, CONFIG)
    with open(path) as f:
        config = json.load(f)
    change(config)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def write_file(d, name, content):
    with open(os.path.join(d, name), "wb") as f:
        f.write(content)


# ------------------------------------------------------------------ edits --

def truncated(d):
    path = os.path.join(d, SAFETENSORS)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def absurd_header_length(d):
    path = os.path.join(d, SAFETENSORS)
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", 1 << 62))


def header_not_json(d):
    path = os.path.join(d, SAFETENSORS)
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.write(b"{not json" + b"!" * (n - 9))


def offsets_past_the_end(d):
    def change(header, data):
        last = tensors(header)[-1]
        begin, end = header[last]["data_offsets"]
        # Same byte count (so the shape still matches), moved past the end.
        header[last]["data_offsets"] = [begin + 4096, end + 4096]
        return header, data
    edit_safetensors(d, change)


def overlapping_tensors(d):
    def change(header, data):
        # The last tensor's range starts inside the one before it; the data
        # shrinks by the same amount so every byte is still covered.
        names = tensors(header)
        prev, last = names[-2], names[-1]
        begin, end = header[last]["data_offsets"]
        shift = min(8, header[prev]["data_offsets"][1] - header[prev]["data_offsets"][0])
        header[last]["data_offsets"] = [begin - shift, end - shift]
        return header, data[:len(data) - shift]
    edit_safetensors(d, change)


def missing_tensor(d):
    edit_safetensors(d, lambda h, data: repack(h, data, drop={MISSING_TENSOR}))


def wrong_shape_for_config(d):
    # The weights are fine; the config asks for a wider feed-forward layer.
    edit_config(d, lambda c: c.update(intermediate_size=c["intermediate_size"] * 2))


def config_not_json(d):
    write_file(d, CONFIG, b'{"model_type": "deberta-v2", "hidden_size": 96,,}')


def heads_not_dividing_hidden(d):
    edit_config(d, lambda c: c.update(num_attention_heads=5))


def garbage_spm(d):
    write_file(d, SPM, b"\x00\x01garbage\xff" * 64)


MISSING_TENSOR = "deberta.encoder.layer.1.attention.self.query_proj.weight"

# kind -> (file the message names, words of the problem, edit)
VARIANTS = {
    "truncated_file": (SAFETENSORS, ["invalid safetensors"], truncated),
    "absurd_header_length": (SAFETENSORS, ["header"], absurd_header_length),
    "header_not_json": (SAFETENSORS, ["JSON"], header_not_json),
    "offsets_past_the_end": (SAFETENSORS, ["past the end"], offsets_past_the_end),
    "overlapping_tensors": (SAFETENSORS, ["overlap"], overlapping_tensors),
    "wrong_shape_for_config": (SAFETENSORS, ["intermediate.dense.weight", "shape"], wrong_shape_for_config),
    "missing_tensor": (SAFETENSORS, [MISSING_TENSOR, "missing"], missing_tensor),
    "config_not_json": (CONFIG, ["JSON"], config_not_json),
    "heads_not_dividing_hidden": (CONFIG, ["num_attention_heads", "hidden_size"], heads_not_dividing_hidden),
    "garbage_spm_model": (SPM, ["spm.model"], garbage_spm),
}


def make_variant(kind, parent=None, src=None):
    """A fresh copy of the classify test model (or `src`) broken by `kind`;
    returns (dir, path of the file the error must name, needles)."""
    file, needles, edit = VARIANTS[kind]
    parent = parent or e2e.scratch_dir("corrupt-" + kind)
    d = os.path.join(parent, kind)
    shutil.copytree(src or e2e.test_models()["classify"], d)
    edit(d)
    return d, os.path.join(d, file), needles
