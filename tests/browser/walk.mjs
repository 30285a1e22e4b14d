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
//                "expect_fits_viewport": { "visible": ["..."] },  // or true: the page fits the
//                    viewport's width (see fitsViewport) and each text is on it, shown whole
//                "screenshot": "01-x.png" } ] }
// Prints one JSON line: { ok, steps: [{ url, status, heading }], error? }; exit 0 when every
// expectation held, 1 otherwise (the reason in `error`), 2 for an unusable plan.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { launch, newPage } from './chromium.mjs';

const STEP_TIMEOUT_MS = 20000;
// How many of a page's layout problems a failure lists.
const MAX_PROBLEMS_SHOWN = 25;

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
  if (spec.expect_fits_viewport) {
    const visible = spec.expect_fits_viewport === true ? [] : spec.expect_fits_viewport.visible || [];
    const problems = await page.evaluate(fitsViewport, [...new Set(visible)]);
    const shown = problems.slice(0, MAX_PROBLEMS_SHOWN);
    if (problems.length > shown.length) shown.push(`and ${problems.length - shown.length} more`);
    check(problems.length === 0, `${where}: does not fit the viewport:\n  ${shown.join('\n  ')}`);
  }
}

// Runs in the page: what keeps it from fitting the viewport's width with nothing hidden, as a list
// of sentences (empty when it fits). The document is no wider than the viewport; no element hides
// what overflows it (`overflow: hidden` or `clip`, an ellipsis), except the controls that scroll
// their own input and screen-reader-only text (1 px, absolutely positioned); every element and
// text lies within the viewport's width unless inside a box that scrolls horizontally itself
// (`overflow-x: auto | scroll`); and each of `visible` is on the page, every occurrence of it
// rendered and reachable: within every box that clips it, or within the scrollable area of a box
// that scrolls (so scrolling brings it into sight).
function fitsViewport(visible) {
  const width = window.innerWidth;
  const problems = [];
  const SLACK = 0.5; // sub-pixel rounding
  const CONTROLS = new Set(['INPUT', 'SELECT', 'TEXTAREA']);
  const named = (element) => {
    const classes = [...element.classList].map((c) => `.${c}`).join('');
    const text = (element.textContent || '').trim().replace(/\s+/g, ' ');
    return `<${element.tagName.toLowerCase()}${element.id ? `#${element.id}` : ''}${classes}> "${text.slice(0, 40)}"`;
  };
  const short = (text) => (text.length > 60 ? `${text.slice(0, 60)}...` : text);
  const scrollsX = (style) => ['auto', 'scroll'].includes(style.overflowX);
  const scrollBoxOf = (element) => {
    for (let up = element.parentElement; up; up = up.parentElement) {
      if (scrollsX(getComputedStyle(up))) return up;
    }
    return null;
  };
  // An element past the edge is reported, not each of its descendants.
  const reported = new Set();
  const withinReported = (element) => {
    for (let up = element; up; up = up.parentElement) if (reported.has(up)) return true;
    return false;
  };
  const outside = (box) => box.left < -SLACK || box.right > width + SLACK;
  const screenReaderOnly = (element) => {
    const box = element.getBoundingClientRect();
    return getComputedStyle(element).position === 'absolute' && box.width <= 1 && box.height <= 1;
  };
  const span = (box) => `${Math.round(box.left)}..${Math.round(box.right)} px`;

  const root = document.documentElement;
  if (root.scrollWidth > width) problems.push(`the document is ${root.scrollWidth} px wide, the viewport ${width} px`);
  for (const element of document.querySelectorAll('*')) {
    if (element.getClientRects().length === 0) continue; // not rendered
    const style = getComputedStyle(element);
    const box = element.getBoundingClientRect();
    const hiddenOnPurpose = screenReaderOnly(element);
    if (!CONTROLS.has(element.tagName) && !hiddenOnPurpose) {
      for (const [axis, overflow] of [['x', style.overflowX], ['y', style.overflowY]]) {
        if (['hidden', 'clip'].includes(overflow)) problems.push(`${named(element)} hides what overflows it (overflow-${axis}: ${overflow})`);
      }
      if (style.textOverflow === 'ellipsis') problems.push(`${named(element)} cuts its text with an ellipsis`);
    }
    if (!hiddenOnPurpose && outside(box) && !scrollBoxOf(element) && !withinReported(element)) {
      reported.add(element);
      problems.push(`${named(element)} spans ${span(box)}, past the viewport's ${width} px`);
    }
  }
  // Text reaching out of its element's box past the viewport.
  const texts = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = texts.nextNode(); node; node = texts.nextNode()) {
    if (!node.data.trim() || scrollBoxOf(node) || screenReaderOnly(node.parentElement)) continue;
    if (withinReported(node.parentElement)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const rect of range.getClientRects()) {
      if (rect.width > 0 && outside(rect)) {
        problems.push(`the text "${short(node.data.trim())}" spans ${span(rect)}, past the viewport's ${width} px`);
        break;
      }
    }
  }

  // Where the part `rect` of a text in `element` is cut off: the first box that clips it, or the
  // viewport; null when it can be seen (scrolling boxes scrolled as needed).
  const cutBy = (element, rect) => {
    let scrolled = false;
    for (let up = element; up && up !== root; up = up.parentElement) {
      const style = getComputedStyle(up);
      if (style.overflowX === 'visible' && style.overflowY === 'visible') continue;
      const box = up.getBoundingClientRect();
      const [sx, sy] = [scrollsX(style), ['auto', 'scroll'].includes(style.overflowY)];
      const left = box.left + up.clientLeft - (sx ? up.scrollLeft : 0);
      const top = box.top + up.clientTop - (sy ? up.scrollTop : 0);
      const right = left + (sx ? up.scrollWidth : up.clientWidth);
      const bottom = top + (sy ? up.scrollHeight : up.clientHeight);
      if (rect.left < left - SLACK || rect.right > right + SLACK || rect.top < top - SLACK || rect.bottom > bottom + SLACK) {
        return named(up);
      }
      if (style.textOverflow === 'ellipsis') return `${named(up)}'s ellipsis`;
      scrolled ||= sx;
    }
    return !scrolled && outside(rect) ? "the viewport's edge" : null;
  };
  for (const wanted of visible) {
    let found = 0;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let at = node.data.indexOf(wanted); at >= 0; at = node.data.indexOf(wanted, at + 1)) {
        found += 1;
        const element = node.parentElement;
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + wanted.length);
        const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
        if (rects.length === 0 || !element.checkVisibility({ opacityProperty: true, visibilityProperty: true })) {
          problems.push(`"${short(wanted)}" in ${named(element)} is not rendered`);
          continue;
        }
        const cut = rects.map((rect) => cutBy(element, rect)).find((by) => by);
        if (cut) problems.push(`"${short(wanted)}" in ${named(element)} is cut off by ${cut}`);
      }
    }
    if (found === 0) problems.push(`"${short(wanted)}" is not on the page (as one text)`);
  }
  return problems;
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
