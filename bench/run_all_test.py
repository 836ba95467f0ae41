#!/usr/bin/python3
"""CI check of the performance harness: `bench/run_all.py --tiny` runs end to
end on tiny models and reports every row of the table (issue 7's nine, the ALBERT row 10, issue 19's
ONNX Runtime rows 11, 12, 14, long-sequence rows 13, 14, issue 16's delay sweep, row 15, and issue 17's HTTP vs gRPC, row 16, issue 19's int8 rows 17-18, and issue 28's OIP vs dserve.v1 row 19; issue 27's
1x512-vs-ORT row 20, bf16-vs-fp32 row 21 and int8-vs-ORT-int8 rows 22-23; issue 26's DeBERTa v1 rows 24-25)
(measured, PASS or MISS; no timing is asserted), in its console output, report.md and report.json, with
issue 27's target table and the harness's definitions, and every timed engine process given >= 2 warm-ups. The demo directory is pointed at a missing
one so the argmax row's fallback (golden classify checkpoint + generated demo texts) runs.

ONNX Runtime is bench-only (bench/onnx/setup.sh installs onnxruntime-node; CI does not). When it is
installed the ORT rows must be measured and ORT's outputs must match eager within 1e-4; when it is not,
they must say "ORT: not installed, run bench/onnx/setup.sh" (SKIP) and everything else must still pass
(the test prints which case it checked). A second run with --ort-dir pointed at an empty folder checks
that degraded path in every case.

usage: run_all_test.py BUILD_DIR SHARED_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = SHARED = None
ORT_ROWS = (11, 12, 14, 20, 22, 23, 25)
N_ROWS = 25
NOT_INSTALLED = "ORT: not installed, run bench/onnx/setup.sh"


def ort_installed():
    """None when the ORT peer can run here, else why not (run_all.py's own test)."""
    if not shutil.which("node"):
        return "node is not on PATH"
    if not os.path.isfile(os.path.join(HERE, "onnx", "node_modules", "onnxruntime-node", "package.json")):
        return "bench/onnx/node_modules/onnxruntime-node is absent (bench/onnx/setup.sh not run)"
    return None


def run_all(tmp, *extra):
    out = os.path.join(tmp, "out")
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "run_all.py"), "--tiny", "--out", out,
                        "--build-dir", BUILD, "--shared-dir", SHARED, "--demo-dir",
                        os.path.join(tmp, "no_demo"), *extra], capture_output=True, text=True,
                       # Sanitizer builds run slower (cmake/DserveSanitize.cmake sets the factor). 540 s:
                       # the tiny run took 162 s inside a loaded suite with the int8 and v1 rows (issue 27/26).
                       timeout=540 * float(os.environ.get("DSERVE_TEST_TIME_FACTOR", "1")))
    report = None
    if os.path.isfile(os.path.join(out, "report.json")):
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
    return p, out, report


class RunAllTiny(unittest.TestCase):
    def test_every_row_reported(self):
        absent = ort_installed()
        print(f"\nrun_all_test: ONNX Runtime rows {ORT_ROWS}: "
              + (f"checking the not-installed path only ({absent})" if absent else "measured (installed)"),
              file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="run_all_test.") as tmp:
            p, out, report = run_all(tmp)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertRegex(p.stdout, r"Machine: nproc \d+, .+, flags ")
            # Row 21 (bf16 vs our fp32) is for machines with avx512_bf16 / amx_bf16 only.
            no_bf16_isa = not ({"avx512_bf16", "amx_bf16"} & set(report["machine"]["flags"].split(",")))
            for n in range(1, N_ROWS + 1):
                want = "SKIP" if (absent and n in ORT_ROWS) or (no_bf16_isa and n == 21) else "PASS|MISS"
                self.assertRegex(p.stdout, rf"\[({want})\] row {n}: ", f"row {n} missing:\n{p.stdout}")
            self.assertEqual([r["row"] for r in report["rows"]], list(range(1, N_ROWS + 1)))
            for r in report["rows"]:
                if absent and r["row"] in ORT_ROWS:
                    self.assertEqual(r["result"], "SKIP", r)
                    self.assertIn(NOT_INSTALLED, r["measured"], r)
                    continue
                if no_bf16_isa and r["row"] == 21:
                    self.assertIn("not applicable", r["measured"], r)
                    continue
                self.assertIn(r["result"], ("PASS", "MISS"), r)
                self.assertIsInstance(r["value"], float, r)
                self.assertTrue(r["target"] and r["config"] and r["measured"], r)
            self.assertEqual(report["errors"], {})
            self.assertEqual(report["ort"]["errors"], {})
            # Rows 1, 3 and 13 carry the ORT figure (or why there is none); the bf16 row says n/a.
            by_row = {r["row"]: r for r in report["rows"]}
            for n in (1, 3, 13):
                self.assertIn(NOT_INSTALLED if absent else "ONNX Runtime fp32", by_row[n]["measured"])
            self.assertIn("ORT: n/a in bf16", by_row[2]["measured"])
            if not absent:
                for sec in ("encoder", "long", "v1"):
                    o = report["sections"][sec]["ort"]
                    self.assertLessEqual(o["max_abs_diff_logits"], 1e-4, o)
                    self.assertLessEqual(o["max_abs_diff_hidden"], 1e-4, o)
            self.assertIn("| 8x128 | fp32 |", p.stdout)  # the side-by-side table
            # The fallback demo data ran, and bf16 was compared on every golden and demo sequence.
            argmax = report["sections"]["argmax"]
            self.assertIn("no demo model built", argmax["demo"]["what"])
            self.assertEqual(argmax["goldens"]["n"], 8)
            self.assertGreater(argmax["demo"]["n"], 0)
            # Rows 17-18 (issue 19): int8 timed beside fp32 in the same process, its argmax compared on the same data.
            self.assertGreater(report["sections"]["encoder"]["ours_8"]["int8"]["median_s"], 0)
            self.assertEqual(len(report["sections"]["encoder"]["ratios"]["int8_8"]), 1)
            for where in ("goldens", "demo"):
                self.assertLessEqual(argmax[where]["int8_eq_fp32"], argmax[where]["n"])
            self.assertRegex(by_row[17]["measured"], r"^\d+\.\d+x \(per round")
            self.assertRegex(by_row[18]["measured"], r"^\d+\.\d+% on demo data")
            self.assertIn("| 8x128 | int8 (dense layers) |", p.stdout)
            # Row 7 reports the packed and the unsorted figure from the server's metrics.
            packing = report["sections"]["packing"]["padded_over_real"]
            self.assertGreaterEqual(packing["packing"], 1.0)
            self.assertGreaterEqual(packing["unsorted"], 1.0)
            with open(os.path.join(out, "report.md")) as f:
                md = f.read()
            self.assertEqual(len(re.findall(r"^\| \d+ \| ", md, re.M)), N_ROWS, md)
            # Issue 27 (a fair harness): >= 2 warm-ups in every timed engine process (dserve, eager, ORT), one
            # median and one ratio definition stated, the spread beside every ratio, the target table printed.
            engines = {w["engine"] for w in report["warmups"]}
            self.assertEqual(engines, {"dserve", "eager"} | (set() if absent else {"ORT"}), report["warmups"])
            for w in report["warmups"]:
                self.assertGreaterEqual(w["warmup"], 2, w)
            self.assertIn("the mean of the two middle values for an even count", report["definitions"])
            self.assertIn("Definitions: warm-ups:", p.stdout)
            self.assertIn("Issue 27 targets", p.stdout)
            for target in ("fp32 1x128: dserve vs ORT", "fp32 8x128: dserve vs ORT", "fp32 1x512: dserve vs ORT",
                           "fp32 8x512: dserve vs ORT", "int8 8x128: dserve int8 vs ORT int8",
                           "int8 1x128: dserve int8 vs ORT int8", "bf16 8x128: MFU", "bf16 vs our fp32",
                           "fp32 8x512 vs eager"):
                self.assertRegex(p.stdout, re.escape(target) + r".*\*\*(PASS|MISS|SKIP)\*\*")
            for n in (1, 13, 17, 24) + (() if absent else (11, 22, 25)):  # 11, 22, 25 are ORT rows
                self.assertIn("spread ", by_row[n]["measured"], by_row[n])
            # Issue 26: the v1 rows ran our v1 encoder, the eager v1 and (when installed) ORT on the v1 export.
            v1 = report["sections"]["v1"]
            self.assertGreater(v1["ours_s"], 0)
            self.assertGreater(v1["eager_s"], 0)
            self.assertIn("v1", v1["shape"])
            # Issue 27: ORT's int8 graph ran and was checked against its fp32 graph.
            i8 = report["sections"]["int8"]
            self.assertGreater(i8["ours_8_s"], 0)
            self.assertGreater(i8["ours_1_s"], 0)
            if not absent:
                self.assertLessEqual(report["sections"]["v1"]["ort"]["max_abs_diff_hidden"], 1e-4)
                self.assertGreater(i8["ort"]["quantized"]["matmuls_quantized"], 0)
                self.assertLessEqual(i8["ort"]["hidden_rel_l2"], 0.25)
                self.assertEqual(i8["ort"]["sequences"], 9)  # 8 + 1 per round, one round
            # Row 15 (issue 16): the delay sweep, every (delay, clients) cell measured.
            delay = report["sections"]["delay"]
            self.assertEqual(sorted(delay["runs"]), sorted(f"{d}/{c}" for d in (0, 2000, 10000) for c in (1, 8, 64)))
            for cell in delay["runs"].values():
                self.assertGreater(cell["items_per_s"], 0, cell)
                self.assertGreaterEqual(cell["mean_batch"], 1.0, cell)
            self.assertEqual(len(re.findall(r"^\| \d+ us \| \d+ \| ", md, re.M)), 9, md)
            self.assertIn("dserve vs ORT", md)
            # Row 16 (issue 17): HTTP and gRPC both served calls in every window.
            http = report["sections"]["http"]
            self.assertEqual(len(http["runs"]["http"]), len(http["runs"]["grpc"]))
            for door in ("http", "grpc"):
                for run in http["runs"][door]:
                    self.assertGreater(run["calls_per_s"], 0, run)
                    self.assertGreater(run["p99_ms"], 0, run)
            self.assertGreater(http["ratio"], 0)
            self.assertRegex(by_row[16]["measured"], r"HTTP/gRPC \d+\.\d+x")
            # Row 19 (issue 28): OIP ModelInfer and dserve.v1 Classify both served calls in every window.
            oip = report["sections"]["oip"]
            self.assertEqual(len(oip["runs"]["oip"]), len(oip["runs"]["dserve"]))
            for door in ("oip", "dserve"):
                for run in oip["runs"][door]:
                    self.assertGreater(run["calls_per_s"], 0, run)
            self.assertRegex(by_row[19]["measured"], r"OIP/dserve.v1 \d+\.\d+x")

    def test_ort_absent_is_said(self):
        """Without onnxruntime-node the ORT rows say how to install it, and the run still succeeds."""
        with tempfile.TemporaryDirectory(prefix="run_all_test.") as tmp:
            # The long section alone (its 4 processes are the cheapest): row 14 is ORT's, row 13 shows it beside.
            p, out, report = run_all(tmp, "--sections", "long", "--ort-dir", os.path.join(tmp, "no_ort"))
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            by_row = {r["row"]: r for r in report["rows"]}
            self.assertEqual(by_row[14]["result"], "SKIP", by_row[14])
            self.assertIn(NOT_INSTALLED, by_row[14]["measured"])
            self.assertRegex(p.stdout, r"\[SKIP\] row 14: ")
            self.assertIn(by_row[13]["result"], ("PASS", "MISS"), by_row[13])
            self.assertIn(NOT_INSTALLED, by_row[13]["measured"])
            self.assertIn("| 8x256 | fp32 |", p.stdout)
            self.assertIn(NOT_INSTALLED, p.stdout)
            self.assertFalse(report["ort"]["available"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    BUILD, SHARED = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1], verbosity=2)
