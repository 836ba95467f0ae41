#!/usr/bin/env python3
"""The family rooms' layering (DESIGN §7, issue 26), read from #include lines.

A model family is one folder (model/deberta, model/albert, model/deberta_v1)
behind the interfaces of model/family/ (network, tokenizer, trainable, and the
config rules of model/checkpoint/config_rules.h). The include graph runs

    model/train -> model/family <- model/deberta, model/albert, model/deberta_v1
                         \\-> model/checkpoint <-/

with no arrow back up:
  1. no family folder includes model/train/;
  2. model/family/ includes a family folder only from its registry files
     (REGISTRIES: the tables that list the families);
  3. model/checkpoint/ includes no family folder, nor model/family/ or
     model/train/ (the config parser reaches the families only through
     FamilyConfigRegistry());
  4. model/checkpoint/model_config.cc (the shared parser) names no family:
     no family-specific field, model_type literal or family type, in its code
     (comments aside);
  5. every family folder has its config rules (<family>_config.h) and its
     training part (<family>_trainable.h), and the registries list each;
  6. the sources of dserve_checkpoint (torch-free: the fuzz build links it)
     reach no LibTorch header through their model/ includes.

Run: family_layering_test.py [SOURCE_DIR]   (default: this checkout). The
self-tests plant one violation of each rule in a copy of model/ and expect the
check to catch it.
"""
import os
import re
import shutil
import sys
import tempfile
import unittest

FAMILY_DIRS = ("model/deberta", "model/albert", "model/deberta_v1")
# The family's prefix of its files: model/deberta/deberta_config.h, ...
FAMILY_PREFIX = {"model/deberta": "deberta", "model/albert": "albert", "model/deberta_v1": "deberta_v1"}
REGISTRIES = {
    "model/family/config_registry.cc": "_config.h",
    "model/family/network.cc": "_network.h",
    "model/family/trainable_family.cc": "_trainable.h",
    "model/family/tokenizer_for_model.cc": None,  # only families with a tokenizer of their own
}
# Words of one family's config rules that the shared parser must not use.
FAMILY_WORDS = (
    r"\balbert\b", r"\bAlbert\w*", r"deberta_v1", r"DebertaV1\w*", r"DebertaConfig", r"AlbertConfig",
    r"\bnum_hidden_groups\b", r"\binner_group_num\b", r"\bclassifier_dropout_prob\b",
    r"\bposition_embedding_type\b", r"\btalking_head\b", r"\blegacy\"\]",
    r"model_type\s*[!=]=\s*\"", r"\"(albert|deberta|deberta-v2)\"",
)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
SOURCE_EXT = (".h", ".cc", ".inc")


def sources(root, folder):
    base = os.path.join(root, folder)
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if name.endswith(SOURCE_EXT):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, root).replace(os.sep, "/"), path


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def strip_comments(text):
    """C++ text without // and /* */ comments (string literals kept)."""
    token = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)
    return token.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)


def in_folder(header, folder):
    return header.startswith(folder + "/")


def check(root):
    """Every violation in the tree at `root`, as lines."""
    problems = []
    # 1. families never include the trainer.
    for folder in FAMILY_DIRS:
        for rel, path in sources(root, folder):
            for inc in includes(path):
                if in_folder(inc, "model/train"):
                    problems.append(f"{rel}: includes {inc} (a family must not include model/train/; "
                                    "the trainable interface is model/family/trainable_family.h)")
    # 2. model/family reaches a family only from a registry.
    for rel, path in sources(root, "model/family"):
        for inc in includes(path):
            if in_folder(inc, "model/train"):
                problems.append(f"{rel}: includes {inc} (model/family sits below model/train/)")
            if any(in_folder(inc, f) for f in FAMILY_DIRS) and rel not in REGISTRIES:
                problems.append(f"{rel}: includes {inc} (only the registries {sorted(REGISTRIES)} "
                                "may name a family folder)")
    # 3. checkpoint below everything.
    for rel, path in sources(root, "model/checkpoint"):
        for inc in includes(path):
            for upper in FAMILY_DIRS + ("model/family", "model/train"):
                if in_folder(inc, upper):
                    problems.append(f"{rel}: includes {inc} (model/checkpoint must not include {upper}/)")
    # 4. the shared parser names no family.
    parser = os.path.join(root, "model/checkpoint/model_config.cc")
    with open(parser, encoding="utf-8") as f:
        code = strip_comments(f.read())
    for number, line in enumerate(code.split("\n"), 1):
        for word in FAMILY_WORDS:
            if re.search(word, line):
                problems.append(f"model/checkpoint/model_config.cc:{number}: names a family ({word!r}): "
                                f"{line.strip()} -- move it to the family's *_config.cc")
    # 5. every family registered in every registry it belongs to.
    for rel, suffix in REGISTRIES.items():
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            problems.append(f"{rel}: missing (a family registry)")
            continue
        if suffix is None:
            continue
        listed = set(includes(path))
        for folder in FAMILY_DIRS:
            header = f"{folder}/{FAMILY_PREFIX[folder]}{suffix}"
            if not os.path.exists(os.path.join(root, header)):
                problems.append(f"{header}: missing (each family folder has one)")
            elif header not in listed:
                problems.append(f"{rel}: does not include {header} (the family is not registered)")
    # 6. dserve_checkpoint stays torch-free.
    problems += torch_free_checkpoint(root)
    return problems


def checkpoint_sources(root):
    cmake = os.path.join(root, "model/checkpoint/CMakeLists.txt")
    with open(cmake, encoding="utf-8") as f:
        text = strip_cmake_comments(f.read())
    m = re.search(r"add_library\(\s*dserve_checkpoint\s+STATIC\s+([^)]*)\)", text)
    if not m:
        return None
    return [os.path.normpath(os.path.join("model/checkpoint", s)).replace(os.sep, "/") for s in m.group(1).split()]


def strip_cmake_comments(text):
    return re.sub(r"#[^\n]*", "", text)


def torch_free_checkpoint(root):
    srcs = checkpoint_sources(root)
    if srcs is None:
        return ["model/checkpoint/CMakeLists.txt: no add_library(dserve_checkpoint STATIC ...)"]
    problems = []
    for src in srcs:
        seen, stack = set(), [(src, (src,))]
        while stack:
            rel, chain = stack.pop()
            if rel in seen:
                continue
            seen.add(rel)
            path = os.path.join(root, rel)
            if not os.path.exists(path):
                if rel == src:
                    problems.append(f"{rel}: listed in dserve_checkpoint but missing")
                continue  # generated or outside model/
            for inc in includes(path):
                if inc.startswith(("torch/", "ATen/", "c10/")):
                    problems.append(f"{src}: reaches <{inc}> through {' -> '.join(chain)} "
                                    "(dserve_checkpoint is torch-free)")
                elif inc.startswith("model/"):
                    stack.append((inc, chain + (inc,)))
    return problems


def repo_root():
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


ROOT = repo_root()


class Layering(unittest.TestCase):
    def test_tree_is_layered(self):
        problems = check(ROOT)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


class CheckCanFail(unittest.TestCase):
    """Each rule, broken once in a copy of model/, is caught."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="family_layering_")
        shutil.copytree(os.path.join(ROOT, "model"), os.path.join(self.tmp, "model"),
                        ignore=shutil.ignore_patterns("*.o", "*.a", "__pycache__"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def append(self, rel, text):
        with open(os.path.join(self.tmp, rel), "a", encoding="utf-8") as f:
            f.write(text)

    def replace(self, rel, old, new):
        path = os.path.join(self.tmp, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))

    def expect(self, fragment):
        problems = check(self.tmp)
        self.assertTrue(any(fragment in p for p in problems), f"{fragment!r} not in {problems}")

    def test_baseline_copy_passes(self):
        self.assertEqual(check(self.tmp), [])

    def test_family_including_train(self):
        self.append("model/albert/albert_text.h", '\n#include "model/train/mlm.h"\n')
        self.expect("model/albert/albert_text.h: includes model/train/mlm.h")

    def test_family_interface_including_a_family(self):
        self.append("model/family/trainable_family.h", '\n#include "model/deberta/encoder.h"\n')
        self.expect("model/family/trainable_family.h: includes model/deberta/encoder.h")

    def test_checkpoint_including_a_family(self):
        self.append("model/checkpoint/model_config.h", '\n#include "model/deberta_v1/deberta_v1_config.h"\n')
        self.expect("model/checkpoint/model_config.h: includes model/deberta_v1/deberta_v1_config.h")

    def test_parser_with_a_family_rule(self):
        self.append("model/checkpoint/model_config.cc",
                    '\nint Groups(const dserve::ModelConfig& c) { return c.albert->num_hidden_groups; }\n')
        self.expect("names a family ('\\\\bnum_hidden_groups\\\\b')")

    def test_parser_comparing_model_type(self):
        self.append("model/checkpoint/model_config.cc",
                    '\nbool V1(const dserve::ModelConfig& c) { return c.model_type == "deberta"; }\n')
        self.expect("model/checkpoint/model_config.cc:")

    def test_comment_is_not_code(self):
        self.append("model/checkpoint/model_config.cc", "\n// AlbertConfig's num_hidden_groups lives elsewhere\n")
        self.assertEqual(check(self.tmp), [])

    def test_unregistered_family(self):
        self.replace("model/family/config_registry.cc", '#include "model/albert/albert_config.h"\n', "")
        self.expect("does not include model/albert/albert_config.h")

    def test_torch_in_checkpoint(self):
        self.append("model/albert/albert_config.h", "\n#include <torch/types.h>\n")
        self.expect("reaches <torch/types.h>")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        ROOT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
