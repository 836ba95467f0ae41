"""The try-it page (GET /) in headless Chromium (issue 17): load it, submit
each form, and check what it rendered equals the API's answers for the same
inputs; the page makes no request outside the server. The screenshot is
kept as a test artifact: <build>/tests/e2e/artifacts/try_it_page.png.

Needs Debian's chromium and tests/e2e/page/node_modules (playwright-core;
deploy/install-deps.sh installs both).
"""
import json
import os
import subprocess
import unittest

import requests

import e2e_support as e2e
import http_support as hs

PAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page")
ARTIFACTS = os.environ.get("DSERVE_E2E_ARTIFACTS") or os.path.join(e2e.SCRATCH, "..", "artifacts")
CHROMIUM = os.environ.get("DSERVE_CHROMIUM", "/usr/bin/chromium")


class TryItPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for need, path in (("chromium (apt-get install chromium)", CHROMIUM),
                           ("playwright-core (npm ci in tests/e2e/page)",
                            os.path.join(PAGE_DIR, "node_modules", "playwright-core"))):
            if not os.path.exists(path):
                raise RuntimeError("missing %s: %s; run deploy/install-deps.sh" % (need, path))
        cls.server = hs.HttpServerProcess(e2e.test_models(), ["--workers", "1"], name="page").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def api(self, path, body):
        r = requests.post(self.server.url(path), json=body, timeout=60)
        self.assertEqual(r.status_code, 200, r.text)
        return r.json()

    def test_forms_render_the_api_results(self):
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.abspath(os.path.join(ARTIFACTS, "try_it_page.png"))
        if os.path.exists(shot):
            os.unlink(shot)
        run = subprocess.run(["node", os.path.join(PAGE_DIR, "test_http_page.js"), self.server.url(""), shot],
                             capture_output=True, text=True, timeout=150, cwd=PAGE_DIR)
        self.assertEqual(run.returncode, 0, "page driver failed:\n%s\n%s" % (run.stderr[-4000:], self.server.log_tail()))
        page = json.loads(run.stdout.strip().splitlines()[-1])
        print("\npage rendered: %s" % json.dumps({k: page[k] for k in ("classify", "answer_text", "rerank")}))
        self.assertEqual(page["console_errors"], [])
        base = self.server.url("")
        self.assertEqual([u for u in page["requests"] if not u.startswith(base)], [], "no external requests")

        # The models table: every served model with its task.
        self.assertEqual(sorted((row[0], row[1]) for row in page["models"]),
                         [("answer", "answer"), ("classify", "classify"), ("rerank", "rerank")])

        # Classify: the labels and scores the API gives for the same text.
        self.assertEqual(page["classify_error"], "")
        want = self.api("/v1/classify", {"model": "classify",
                                         "texts": ["I was charged twice for my order, please refund me."]})
        self.assertEqual([label for label, _ in page["classify"]], [l["label"] for l in want["results"][0]["labels"]])
        for (_, shown), l in zip(page["classify"], want["results"][0]["labels"]):
            self.assertAlmostEqual(shown, l["score"], places=4)  # shown with 4 decimals

        # Answer: the answer highlighted inside the context.
        self.assertEqual(page["answer_error"], "")
        context = "A river runs past the old mill, and the miller still opens the doors every morning at six."
        want = self.api("/v1/answer", {"model": "answer", "inputs": {"question": "When does the miller open the doors?",
                                                                     "context": context},
                                       "parameters": {"handle_impossible_answer": True}})
        self.assertEqual(page["answer_context"], context)
        if want["answer"]:
            self.assertEqual(page["answer_mark"], want["answer"])
            self.assertEqual(page["answer_text"], "Answer: " + want["answer"])
        else:
            self.assertEqual(page["answer_text"], "(no answer in this text)")

        # Rerank: the API's order and scores.
        self.assertEqual(page["rerank_error"], "")
        want = self.api("/v1/rerank", {"model": "rerank", "query": "where can I buy fresh bread", "documents": [
            "The baker next door sells bread, rolls, and small cakes with honey on top.",
            "Engineers measure things carefully before they build anything.",
            "Gulls circle the boats."]})
        self.assertEqual([i for i, _ in page["rerank"]], [r["index"] for r in want["results"]])
        for (_, shown), r in zip(page["rerank"], want["results"]):
            self.assertAlmostEqual(shown, r["relevance_score"], places=6)

        self.assertTrue(os.path.getsize(shot) > 10000, "screenshot written: " + shot)
        print("screenshot: %s" % shot)


if __name__ == "__main__":
    unittest.main()
