// Walks real headless Chromium through gatehouse's pages and the sign-ins they redirect to, one
// step at a time, checking where each step lands and what it shows.
//
//   node target/browser-node/walk.mjs < plan.json      (Node 20+, ESM)
//
// Staged beside the pinned playwright-core by `scripts/npm-stage tests/browser target/browser-node
// walk.mjs chromium.mjs`, called by `common::browser::walk` in the Rust tests. Launches $GATEHOUSE_CHROMIUM,
// else Debian's /usr/bin/chromium; nothing is downloaded.
//
// Plan on stdin:
//   { "screenshots": "/abs/dir",
//     "headers": { "X-Forwarded-User": "bob" },                   // optional: sent with every request
//     "viewport": { "width": 375, "height": 812 },                // optional: a phone's screen
//     "steps": [ { "goto": URL } or { "click": CSS selector },      // a click that navigates
//                "fill": { "#principal": "alice" },              // optional, before the click
//                "select": { "#action": "admin" },               // optional, before the click
//                "expect_url_prefix": "http://127.0.0.1:PORT/connect/",  // where it ends up
//                "expect_status": 200,                           // of the final response
//                "expect_heading": "text in the <h1>",
//                "expect_text": ["..."], "absent_text": ["..."],
//                "expect_whole": { "selector": "pre.whole", "text": ["..."] },  // shown whole:
//                    the texts in it, nothing clipped, cut with an ellipsis or scrolled out of
//                    sight, and the element within the viewport's width
//                "screenshot": "01-x.png" } ] }
// Prints one JSON line: { ok, steps: [{ url, status, heading }], error? }; exit 0 when every
// expectation held, 1 otherwise (the reason in `error`), 2 for an unusable plan.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { launch, newPage } from './chromium.mjs';

const STEP_TIMEOUT_MS = 20000;

const result = { ok: false, steps: [] };

class Failure extends Error {}

function check(condition, message) {
  if (!condition) throw new Failure(message);
}

async function readPlan() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  const plan = JSON.parse(text);
  if (!Array.isArray(plan.steps) || typeof plan.screenshots !== 'string') {
    throw new Error('the plan needs "steps" (a list) and "screenshots" (a directory)');
  }
  return plan;
}

async function step(page, plan, spec, index) {
  let response;
  for (const [selector, value] of Object.entries(spec.fill || {})) {
    await page.fill(selector, value, { timeout: STEP_TIMEOUT_MS });
  }
  for (const [selector, value] of Object.entries(spec.select || {})) {
    await page.selectOption(selector, value, { timeout: STEP_TIMEOUT_MS });
  }
  if (spec.goto) {
    response = await page.goto(spec.goto, { waitUntil: 'load', timeout: STEP_TIMEOUT_MS });
  } else if (spec.click) {
    [response] = await Promise.all([
      page.waitForNavigation({ waitUntil: 'load', timeout: STEP_TIMEOUT_MS }),
      page.click(spec.click, { timeout: STEP_TIMEOUT_MS }),
    ]);
  } else {
    throw new Failure(`step ${index}: neither goto nor click`);
  }
  const url = page.url();
  const status = response ? response.status() : null;
  const heading = (await page.locator('h1').first().textContent({ timeout: STEP_TIMEOUT_MS }).catch(() => '')) || '';
  result.steps.push({ url, status, heading: heading.trim() });
  if (spec.screenshot) {
    mkdirSync(plan.screenshots, { recursive: true });
    await page.screenshot({ path: path.join(plan.screenshots, spec.screenshot), fullPage: true });
  }
  const where = `step ${index} (${spec.goto || spec.click}) ended at ${url} [${status}] "${heading.trim()}"`;
  if (spec.expect_url_prefix) check(url.startsWith(spec.expect_url_prefix), `${where}: expected ${spec.expect_url_prefix}`);
  if (spec.expect_status) check(status === spec.expect_status, `${where}: expected status ${spec.expect_status}`);
  if (spec.expect_heading) check(heading.includes(spec.expect_heading), `${where}: expected heading "${spec.expect_heading}"`);
  const text = await page.locator('body').innerText();
  for (const wanted of spec.expect_text || []) check(text.includes(wanted), `${where}: "${wanted}" is not on the page`);
  for (const unwanted of spec.absent_text || []) check(!text.includes(unwanted), `${where}: "${unwanted}" is on the page`);
  if (spec.expect_whole) await expectWhole(page, spec.expect_whole, where);
}

// The element `selector` shows all of `text`: it clips nothing (no hidden overflow, no ellipsis,
// no content wider than its box, which would scroll out of sight) and lies within the viewport.
async function expectWhole(page, { selector, text }, where) {
  const seen = await page.locator(selector).first().evaluate((element) => {
    const style = getComputedStyle(element);
    const box = element.getBoundingClientRect();
    return {
      text: element.innerText,
      overflowX: style.overflowX,
      overflowY: style.overflowY,
      textOverflow: style.textOverflow,
      scrollWidth: element.scrollWidth,
      clientWidth: element.clientWidth,
      right: box.right,
      viewport: document.documentElement.clientWidth,
    };
  }, { timeout: STEP_TIMEOUT_MS });
  const shown = `${where}: ${selector} ${JSON.stringify({ ...seen, text: undefined })}`;
  for (const wanted of text) check(seen.text.includes(wanted), `${where}: "${wanted}" is not in ${selector}`);
  check(![seen.overflowX, seen.overflowY].includes('hidden') && seen.textOverflow !== 'ellipsis', `${shown}: clips`);
  check(seen.scrollWidth <= seen.clientWidth, `${shown}: wider than its box`);
  check(seen.right <= seen.viewport, `${shown}: reaches past the viewport`);
}

async function main() {
  let plan;
  try {
    plan = await readPlan();
  } catch (error) {
    console.log(JSON.stringify({ ok: false, error: `unusable plan: ${error.message}` }));
    process.exit(2);
  }
  const browser = await launch();
  let page;
  try {
    page = await newPage(browser, plan.viewport);
    if (plan.headers) await page.context().setExtraHTTPHeaders(plan.headers);
    for (const [index, spec] of plan.steps.entries()) {
      await step(page, plan, spec, index + 1);
    }
    result.ok = true;
  } catch (error) {
    result.error = error instanceof Failure ? error.message : `${error.name}: ${error.message}`;
    if (page) await page.screenshot({ path: path.join(plan.screenshots, '99-failure.png'), fullPage: true }).catch(() => {});
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
  if (!result.ok) {
    console.error(result.error);
    process.exit(1);
  }
}

main();
