// Drives the try-it page (GET /, server/doors/http/index.html) in Debian's headless
// Chromium with playwright-core: loads it, submits each form and prints what
// the page rendered as one JSON line for tests/e2e/test_http_page.py to
// compare with the API's own answers. Keeps a screenshot.
//
// usage: node test_http_page.js BASE_URL SCREENSHOT.png
// env:   DSERVE_CHROMIUM (default /usr/bin/chromium)
"use strict";
const { chromium } = require("playwright-core");

async function main() {
  const [base, screenshot] = process.argv.slice(2);
  if (!base || !screenshot) throw new Error("usage: node test_http_page.js BASE_URL SCREENSHOT.png");
  const browser = await chromium.launch({
    executablePath: process.env.DSERVE_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    // Root in CI containers: Chromium's sandbox needs user namespaces.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const out = { requests: [], console_errors: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 1600 } });
    // The page must need nothing but the server: record every request.
    page.on("request", (r) => out.requests.push(r.url()));
    page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
    page.on("pageerror", (e) => out.console_errors.push(String(e)));
    await page.goto(base + "/", { waitUntil: "load" });
    await page.waitForSelector("#models tbody tr", { timeout: 20000 });
    out.models = await page.$$eval("#models tbody tr", (rows) =>
      rows.map((r) => Array.from(r.children).map((td) => td.textContent)));

    await page.fill("#classify-text", "I was charged twice for my order, please refund me.");
    await page.click("#classify-submit");
    await page.waitForSelector("#classify-result[data-done='1']", { timeout: 30000 });
    out.classify = await page.$$eval("#classify-labels tr", (rows) =>
      rows.map((r) => [r.children[0].textContent, Number(r.children[1].textContent)]));
    out.classify_error = await page.$eval("#classify-result", (e) => (e.querySelector(".error") || {}).textContent || "");

    await page.fill("#answer-question", "When does the miller open the doors?");
    await page.fill("#answer-context",
                    "A river runs past the old mill, and the miller still opens the doors every morning at six.");
    await page.click("#answer-submit");
    await page.waitForSelector("#answer-result[data-done='1']", { timeout: 30000 });
    out.answer_text = await page.$eval("#answer-result", (e) => (e.querySelector("#answer-text") || {}).textContent || "");
    out.answer_mark = await page.$eval("#answer-result", (e) => (e.querySelector("#answer-mark") || {}).textContent || "");
    out.answer_context = await page.$eval("#answer-result",
                                          (e) => (e.querySelector("#answer-context-shown") || {}).textContent || "");
    out.answer_error = await page.$eval("#answer-result", (e) => (e.querySelector(".error") || {}).textContent || "");

    await page.fill("#rerank-query", "where can I buy fresh bread");
    await page.fill("#rerank-documents", [
      "The baker next door sells bread, rolls, and small cakes with honey on top.",
      "Engineers measure things carefully before they build anything.",
      "Gulls circle the boats.",
    ].join("\n"));
    await page.click("#rerank-submit");
    await page.waitForSelector("#rerank-result[data-done='1']", { timeout: 30000 });
    out.rerank = await page.$$eval("#rerank-list li", (items) =>
      items.map((li) => [Number(li.dataset.index), Number(li.dataset.score)]));
    out.rerank_error = await page.$eval("#rerank-result", (e) => (e.querySelector(".error") || {}).textContent || "");

    await page.screenshot({ path: screenshot, fullPage: true });
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
