#!/usr/bin/python3
"""CI check of the performance harness: `bench/run_all.py --tiny` runs end to
end on tiny models and reports every row of the table (issue 7's nine and the ALBERT row 10) (measured,
PASS or MISS; no timing is asserted), in its console output, report.md and
report.json. The demo directory is pointed at a missing one so the argmax
row's fallback (golden classify checkpoint + generated demo texts) runs.

usage: run_all_test.py BUILD_DIR SHARED_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = SHARED = None


class RunAllTiny(unittest.TestCase):
    def test_every_row_reported(self):
        with tempfile.TemporaryDirectory(prefix="run_all_test.") as tmp:
            out = os.path.join(tmp, "out")
            p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "run_all.py"), "--tiny", "--out", out,
                                "--build-dir", BUILD, "--shared-dir", SHARED, "--demo-dir",
                                os.path.join(tmp, "no_demo")], capture_output=True, text=True,
                               # Sanitizer builds run slower (cmake/DserveSanitize.cmake sets the factor).
                               timeout=300 * float(os.environ.get("DSERVE_TEST_TIME_FACTOR", "1")))
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertRegex(p.stdout, r"Machine: nproc \d+, .+, flags ")
            for n in range(1, 11):
                self.assertRegex(p.stdout, rf"\[(PASS|MISS)\] row {n}: ", f"row {n} missing:\n{p.stdout}")
            with open(os.path.join(out, "report.json")) as f:
                report = json.load(f)
            self.assertEqual([r["row"] for r in report["rows"]], list(range(1, 11)))
            for r in report["rows"]:
                self.assertIn(r["result"], ("PASS", "MISS"), r)
                self.assertIsInstance(r["value"], float, r)
                self.assertTrue(r["target"] and r["config"] and r["measured"], r)
            self.assertEqual(report["errors"], {})
            # The fallback demo data ran, and bf16 was compared on every golden and demo sequence.
            argmax = report["sections"]["argmax"]
            self.assertIn("no demo model built", argmax["demo"]["what"])
            self.assertEqual(argmax["goldens"]["n"], 8)
            self.assertGreater(argmax["demo"]["n"], 0)
            # Row 7 reports the packed and the unsorted figure from the server's metrics.
            packing = report["sections"]["packing"]["padded_over_real"]
            self.assertGreaterEqual(packing["packing"], 1.0)
            self.assertGreaterEqual(packing["unsorted"], 1.0)
            with open(os.path.join(out, "report.md")) as f:
                md = f.read()
            self.assertEqual(len(re.findall(r"^\| \d+ \| ", md, re.M)), 10, md)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    BUILD, SHARED = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1], verbosity=2)
