// The status page in headless chromium (driven by playwright-core): see
// test-status-page.sh. Environment: DSV_URL (the page), DSV_KEY (the API key),
// DSV_EXPECT (JSON [{name, cpus}] from `dsvisor status`), DSV_CHROMIUM, DSV_SCREENSHOT,
// NODE_PATH (where playwright-core is installed).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { inflateSync } from "node:zlib";

const require = createRequire(process.env.NODE_PATH + "/");
const { chromium } = require("playwright-core");

const url = process.env.DSV_URL;
const key = process.env.DSV_KEY;
const expected = JSON.parse(process.env.DSV_EXPECT);
let failed = 0;
function check(what, ok, detail) {
  console.log((ok ? "ok     " : "NOT OK ") + what + (!ok && detail !== undefined ? "\n       " + detail : ""));
  if (!ok) failed++;
}

// An 8-bit RGB or RGBA, non-interlaced PNG (what chromium's screenshots are) into pixels.
function decodePng(buf) {
  if (buf.readUInt32BE(0) !== 0x89504e47) throw new Error("not a PNG");
  let off = 8, width = 0, height = 0, depth = 0, type = 0, interlace = 0;
  const idat = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const kind = buf.toString("latin1", off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (kind === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      depth = data[8];
      type = data[9];
      interlace = data[12];
    } else if (kind === "IDAT") {
      idat.push(data);
    }
    off += 12 + len;
  }
  if (depth !== 8 || (type !== 2 && type !== 6) || interlace !== 0)
    throw new Error(`unexpected PNG: depth ${depth} colour type ${type} interlace ${interlace}`);
  const bpp = type === 6 ? 4 : 3, stride = width * bpp;
  const raw = inflateSync(Buffer.concat(idat));
  const px = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? px[y * stride + x - bpp] : 0;
      const b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= bpp && y > 0 ? px[(y - 1) * stride + x - bpp] : 0;
      let v = line[x];
      if (f === 1) v += a;
      else if (f === 2) v += b;
      else if (f === 3) v += (a + b) >> 1;
      else if (f === 4) {
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      px[y * stride + x] = v & 0xff;
    }
  }
  return { width, height, bpp, px };
}

const browser = await chromium.launch({ executablePath: process.env.DSV_CHROMIUM, headless: true });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const origin = new URL(url).origin;
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(url);

  // The instances, with the CPUs the supervisor reports.
  await page.waitForFunction(() => {
    const rows = document.querySelectorAll("#instances tbody tr.instance");
    return rows.length > 0 && [...rows].every((r) => r.querySelector(".cpus").textContent !== "–");
  }, null, { timeout: 30000 });
  const rows = await page.$$eval("#instances tbody tr.instance", (rs) => rs.map((r) => ({
    name: r.dataset.name, cpus: r.querySelector(".cpus").textContent, state: r.querySelector(".state").textContent,
    restarts: r.querySelector(".restarts").textContent, limits: r.querySelector(".limits").textContent,
    drift: r.querySelector(".drift") !== null })));
  check("the page lists 2 instances", rows.length === 2, JSON.stringify(rows));
  check("each with the CPUs `dsvisor status` reports", JSON.stringify(rows.map((r) => ({ name: r.name, cpus: r.cpus })))
        === JSON.stringify(expected), JSON.stringify(rows) + " vs " + JSON.stringify(expected));
  check("each ready, with its restarts, cgroup limits and output drift cell",
        rows.every((r) => r.state === "ready" && r.restarts === "0" && r.limits !== "" && r.drift), JSON.stringify(rows));
  check("the model id is shown", (await page.textContent("#model")) === "default");
  check("the API key field is shown (keys are on)", await page.isVisible("#key"));

  // A chat without the key: the gateway's 401 is shown.
  await page.fill("#prompt", "Who made the sea?");
  await page.click("#send");
  await page.waitForSelector(".msg.assistant.done", { timeout: 30000 });
  const refused = await page.$eval(".msg.assistant.done", (m) => ({ error: m.classList.contains("error"),
                                                                    text: m.querySelector(".text").textContent }));
  check("without the key the chat shows the 401", refused.error && /HTTP 401/.test(refused.text), JSON.stringify(refused));

  // With the key typed in: the reply streams into the page, piece by piece.
  await page.fill("#key", key);
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const m = [...document.querySelectorAll(".msg.assistant")].pop();
      if (m && m.classList.contains("streaming"))
        window.__lengths.push(m.querySelector(".text").textContent.length);
    }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
  });
  await page.fill("#prompt", "What can you tell me about the sea?");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant.done").length === 2, null,
                             { timeout: 120000 });
  const reply = await page.$$eval(".msg.assistant.done", (ms) => {
    const m = ms[ms.length - 1];
    return { error: m.classList.contains("error"), text: m.querySelector(".text").textContent };
  });
  const lengths = [...new Set((await page.evaluate(() => window.__lengths)).filter((n) => n > 0))];
  check("with the key the reply arrives without an error", !reply.error && reply.text.trim().length > 0,
        JSON.stringify(reply));
  check("the reply was streamed: the page showed it growing", lengths.length >= 2 && lengths[0] < reply.text.length,
        JSON.stringify(lengths) + " final " + reply.text.length);
  console.log("       reply: " + JSON.stringify(reply.text.slice(0, 120)) + `; ${lengths.length} partial lengths`);

  // The instance that served it shows the request in its live figures.
  const served = await page.waitForFunction(() => {
    for (const r of document.querySelectorAll("#instances tbody tr.instance"))
      if (Number(r.querySelector(".requests").textContent) >= 1 && r.querySelector(".e2e-p50").textContent !== "–" &&
          Number(r.querySelector(".tokens-per-s").textContent) > 0)
        return { name: r.dataset.name, p50: r.querySelector(".e2e-p50").textContent,
                 p99: r.querySelector(".e2e-p99").textContent, tps: r.querySelector(".tokens-per-s").textContent };
    return null;
  }, null, { timeout: 30000 }).then((h) => h.jsonValue(), () => null);
  check("an instance shows the request: e2e P50/P99 and tokens/s from the gateway's histograms", served !== null);
  if (served) console.log("       " + JSON.stringify(served));

  const foreign = requests.filter((u) => new URL(u).origin !== origin);
  check(`every request the page made stayed on ${origin} (${requests.length} requests)`, foreign.length === 0,
        foreign.join(" "));
  check("no script error in the page", consoleErrors.filter((e) => !/401/.test(e)).length === 0,
        consoleErrors.join("\n       "));

  // The screenshot: decoded, it has the page's many colours and mostly not the background.
  await page.screenshot({ path: process.env.DSV_SCREENSHOT, fullPage: true });
  const img = decodePng(readFileSync(process.env.DSV_SCREENSHOT));
  const colours = new Map();
  for (let i = 0; i < img.px.length; i += img.bpp) {
    const c = (img.px[i] << 16) | (img.px[i + 1] << 8) | img.px[i + 2];
    colours.set(c, (colours.get(c) || 0) + 1);
  }
  const n = img.width * img.height;
  const background = Math.max(...colours.values());
  console.log(`       screenshot ${img.width}x${img.height}: ${colours.size} colours, ` +
              `${(100 * (n - background) / n).toFixed(1)}% not the most common one`);
  check("the screenshot is not blank: many colours, a fifth of it not the background",
        colours.size >= 32 && n - background >= n / 5);
} finally {
  await browser.close();
}
console.log(failed ? `${failed} failed` : "all passed");
process.exit(failed ? 1 : 0);
