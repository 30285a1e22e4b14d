// Drives one hosted gatehouse form in real headless Chromium and checks what a user would see.
//
//   node target/browser-node/fill_form.mjs < plan.json      (Node 20+, ESM)
//
// Staged beside the pinned playwright-core by `scripts/npm-stage tests/browser target/browser-node
// fill_form.mjs chromium.mjs` (never run from tests/: `import 'playwright-core'` resolves only in the stage), and
// called by `common::browser::fill_form` in the Rust tests. No browser is downloaded: it launches
// $GATEHOUSE_CHROMIUM, else Debian's /usr/bin/chromium.
//
// Reads one JSON plan on stdin:
//   { "url": "http://127.0.0.1:PORT/forms/ID",
//     "screenshots": "/abs/dir",                 // full-page 01-form.png, 02-invalid.png, 03-done.png
//                                                //   (99-failure.png when a step fails)
//     "first":  { "fill": {NAME: text}, "check": [NAME], "select": {NAME: value} },
//     "expect_error_field": "api_key",
//     "second": { "fill": {NAME: text}, "check": [NAME] },   // typed with the keyboard only
//     "expect_done_heading": "Saved",
//     "expect_kept_choices": false,              // optional: also require checkboxes/selects of
//                                                //   `first` to survive the 422 re-render
//     "then_visit": [{ "url", "screenshot": "04-x.png", "expect_text": [..], "absent_text": [..] }] }
//                                                // optional: pages opened afterwards in the same
//                                                //   browser, checked for text and screenshotted
// Prints one JSON line on stdout: { ok, statuses, screenshots, kept_values, kept_choices,
// password_inputs_empty, checks, error? } and exits 0 when every expectation held, else 1 (the
// reason is in `error` and on stderr). Exit 2: the plan itself is unusable.
//
// What it checks:
//   1. GET url answers 200 (screenshot 01). On every page: each visible input/select/textarea with
//      an id has a <label for=id>, and sits in a <fieldset> that has a <legend>.
//   2. `first` is applied by element id (#field-NAME: fill / check / selectOption); the submit button
//      button[name=action][value=submit] is clicked. The re-render answers 422; the field
//      `expect_error_field` shows a visible, non-empty #field-NAME-error, has aria-invalid="true"
//      and an aria-describedby naming that error; a role="alert" error summary exists and links to
//      #field-NAME. Every input[type=password] is empty (secrets are not echoed back; no control
//      carries a submitted secret), every non-password text of `first` kept its exact value
//      (including hostile markup), and no JavaScript dialog ever opened (no injected script ran).
//      Screenshot 02.
//   3. `second` is applied with the keyboard only: from the top of the page, Tab (at most 60 presses)
//      until document.activeElement is #field-NAME, Control+A, type the text (checkboxes: Space
//      when the state differs); then Tab to the submit button and press Enter. The final page
//      answers 200 (after redirects) and its <h1> contains `expect_done_heading`. Screenshot 03.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { launch, newPage } from './chromium.mjs';

const MAX_TABS = 60;
const SUBMIT = 'button[name=action][value=submit]';

const result = {
  ok: false,
  statuses: [],
  screenshots: [],
  kept_values: {},
  kept_choices: {},
  password_inputs_empty: null,
  checks: [],
};

class Failure extends Error {}
function expect(condition, what, detail = '') {
  if (!condition) throw new Failure(`expected ${what}${detail ? `, but ${detail}` : ''}`);
  result.checks.push(what);
}
const show = (v) => JSON.stringify(v);
const fieldId = (name) => `field-${name}`;
const byId = (id) => `[id="${id.replace(/["\\]/g, '\\$&')}"]`;

async function readPlan() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  const plan = JSON.parse(text);
  for (const key of ['url', 'screenshots', 'expect_error_field', 'expect_done_heading']) {
    if (typeof plan[key] !== 'string' || !plan[key]) throw new Error(`plan.${key} must be a non-empty string`);
  }
  if (!path.isAbsolute(plan.screenshots)) throw new Error('plan.screenshots must be an absolute path');
  for (const step of ['first', 'second']) {
    const s = plan[step];
    if (!s || typeof s !== 'object') throw new Error(`plan.${step} must be an object`);
    const allowed = step === 'first' ? ['fill', 'check', 'select'] : ['fill', 'check'];
    for (const key of Object.keys(s)) {
      if (!allowed.includes(key)) throw new Error(`plan.${step}.${key} is not supported (use ${allowed.join(', ')})`);
    }
  }
  return plan;
}

async function screenshot(page, plan, name) {
  const file = path.join(plan.screenshots, name);
  await page.screenshot({ path: file, fullPage: true });
  result.screenshots.push(file);
}

/// Labels bound to controls and fieldsets with legends, on whatever page is showing.
async function checkStructure(page, pageName) {
  const problems = await page.evaluate(() => {
    const out = [];
    const visible = (el) => {
      const style = getComputedStyle(el);
      return el.getClientRects().length > 0 && style.visibility !== 'hidden' && style.display !== 'none';
    };
    const controls = [...document.querySelectorAll('input, select, textarea')]
      .filter((el) => el.type !== 'hidden' && visible(el));
    for (const el of controls) {
      const what = `<${el.tagName.toLowerCase()}${el.id ? ` id="${el.id}"` : ` name="${el.name}"`}>`;
      if (el.id) {
        const labels = [...document.querySelectorAll('label')].filter((l) => l.htmlFor === el.id);
        if (labels.length === 0) out.push(`${what} has no <label for="${el.id}">`);
        else if (!labels.some((l) => l.textContent.trim())) out.push(`${what}'s label is empty`);
      }
      const fieldset = el.closest('fieldset');
      if (!fieldset) out.push(`${what} is not inside a <fieldset>`);
      else if (!fieldset.querySelector(':scope > legend')?.textContent.trim()) {
        out.push(`${what}'s <fieldset> has no non-empty <legend>`);
      }
    }
    return { problems: out, count: controls.length };
  });
  expect(
    problems.problems.length === 0,
    `${pageName}: ${problems.count} visible control(s) have bound <label for> and sit in a <fieldset> with a <legend>`,
    problems.problems.join('; '),
  );
}

/// Submits by `trigger` and returns the main-frame response the navigation ended on (after redirects).
async function submit(page, trigger) {
  const [response] = await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), trigger()]);
  if (!response) throw new Failure('the submission did not load a new document');
  return response;
}

/// Presses Tab until document.activeElement matches `selector`; returns the number of presses.
async function tabTo(page, description, selector) {
  const seen = [];
  for (let i = 1; i <= MAX_TABS; i++) {
    await page.keyboard.press('Tab');
    const focus = await page.evaluate((sel) => {
      const el = document.activeElement;
      return {
        hit: el?.matches(sel) ?? false,
        what: el ? `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}` : 'none',
      };
    }, selector);
    if (focus.hit) return i;
    seen.push(focus.what);
  }
  throw new Failure(
    `keyboard: ${description} not reached after ${MAX_TABS} Tab presses; focus went ${seen.slice(0, 20).join(' → ')}`,
  );
}

/// Sequential focus navigation starts again from the top of the document.
async function focusTop(page) {
  await page.evaluate(() => {
    document.activeElement?.blur?.();
    window.scrollTo(0, 0);
    document.body.focus();
  });
}

async function run(plan) {
  mkdirSync(plan.screenshots, { recursive: true });
  const browser = await launch();
  let page;
  try {
    page = await newPage(browser);
    page.setDefaultTimeout(15_000);
    const dialogs = [];
    page.on('dialog', (dialog) => {
      dialogs.push(`${dialog.type()}: ${dialog.message()}`);
      dialog.dismiss().catch(() => {});
    });
    const noDialogs = (when) =>
      expect(dialogs.length === 0, `${when}: no JavaScript dialog opened (no injected script ran)`, dialogs.join('; '));

    try {
      await runSteps(plan, page, noDialogs);
    } catch (error) {
      if (page && !page.isClosed()) {
        await screenshot(page, plan, '99-failure.png').catch(() => {});
      }
      throw error;
    }
  } finally {
    await browser.close().catch(() => {});
  }
}

async function runSteps(plan, page, noDialogs) {
  // --- 1. the empty form -------------------------------------------------------------------------
  const first = await page.goto(plan.url, { waitUntil: 'load' });
  result.statuses.push(first?.status() ?? null);
  expect(first?.status() === 200, `GET ${plan.url} answers 200`, `got ${first?.status()}`);
  await screenshot(page, plan, '01-form.png');
  await checkStructure(page, 'form page');

  // --- 2. first attempt, by element id -------------------------------------------------------------
  const fill = plan.first.fill ?? {};
  const check = plan.first.check ?? [];
  const select = plan.first.select ?? {};
  const secrets = [];
  for (const [name, value] of Object.entries(fill)) {
    const input = page.locator(byId(fieldId(name)));
    if ((await input.getAttribute('type')) === 'password') secrets.push(value);
    await input.fill(value);
  }
  for (const name of check) await page.locator(byId(fieldId(name))).check();
  for (const [name, value] of Object.entries(select)) await page.locator(byId(fieldId(name))).selectOption(value);
  result.checks.push(
    `first attempt applied by id: fill ${show(Object.keys(fill))}, check ${show(check)}, select ${show(Object.keys(select))}`,
  );

  const invalid = await submit(page, () => page.locator(SUBMIT).click());
  result.statuses.push(invalid.status());
  expect(invalid.status() === 422, 'first submission answers 422', `got ${invalid.status()}`);

  const field = plan.expect_error_field;
  const errorId = `${fieldId(field)}-error`;
  const error = page.locator(byId(errorId));
  expect((await error.count()) === 1, `#${errorId} exists`, 'no such element');
  const errorText = (await error.textContent())?.trim() ?? '';
  expect((await error.isVisible()) && errorText !== '', `#${errorId} is visible and says ${show(errorText)}`,
    `visible=${await error.isVisible()} text=${show(errorText)}`);
  const control = page.locator(byId(fieldId(field)));
  const ariaInvalid = await control.getAttribute('aria-invalid');
  expect(ariaInvalid === 'true', `#${fieldId(field)} has aria-invalid="true"`, `aria-invalid=${show(ariaInvalid)}`);
  const describedBy = (await control.getAttribute('aria-describedby')) ?? '';
  expect(describedBy.split(/\s+/).includes(errorId), `#${fieldId(field)} aria-describedby names ${errorId}`,
    `aria-describedby=${show(describedBy)}`);
  const alerts = page.locator('[role="alert"]');
  expect((await alerts.count()) >= 1, 'an error summary with role="alert" is shown', 'none found');
  const summaryLinks = await alerts.evaluateAll(
    (nodes, target) => nodes.some((n) => [...n.querySelectorAll('a[href]')].some((a) => a.getAttribute('href').endsWith(target))),
    `#${fieldId(field)}`,
  );
  expect(summaryLinks, `the error summary links to #${fieldId(field)}`, 'no such link inside role="alert"');

  const passwords = await page.locator('input[type=password]').evaluateAll((nodes) =>
    nodes.map((n) => ({ id: n.id || n.name, value: n.value, attribute: n.getAttribute('value') })),
  );
  result.password_inputs_empty = passwords.every((p) => p.value === '' && !p.attribute);
  expect(result.password_inputs_empty, `${passwords.length} password input(s) are empty after the re-render`,
    passwords.filter((p) => p.value !== '' || p.attribute).map((p) => `#${p.id} holds ${show(p.value || p.attribute)}`).join('; '));
  const echoed = await page.evaluate(
    (values) => [...document.querySelectorAll('input, textarea')]
      .filter((n) => values.includes(n.value) || values.includes(n.getAttribute('value')))
      .map((n) => n.id || n.name || n.tagName),
    secrets.filter((s) => s !== ''),
  );
  expect(echoed.length === 0, 'no form control carries a submitted secret', `echoed in ${echoed.join(', ')}`);

  const lost = [];
  for (const [name, value] of Object.entries(fill)) {
    const input = page.locator(byId(fieldId(name)));
    if ((await input.getAttribute('type')) === 'password') continue;
    const now = await input.inputValue();
    result.kept_values[name] = now;
    if (now !== value) lost.push(`#${fieldId(name)} is ${show(now)}, typed ${show(value)}`);
  }
  expect(lost.length === 0, `text fields kept their exact typed values: ${show(result.kept_values)}`, lost.join('; '));

  const changed = [];
  for (const name of check) {
    result.kept_choices[name] = await page.locator(byId(fieldId(name))).isChecked();
    if (!result.kept_choices[name]) changed.push(`#${fieldId(name)} is no longer checked`);
  }
  for (const [name, value] of Object.entries(select)) {
    result.kept_choices[name] = await page.locator(byId(fieldId(name))).inputValue();
    if (result.kept_choices[name] !== value) changed.push(`#${fieldId(name)} is ${show(result.kept_choices[name])}, chose ${show(value)}`);
  }
  if (plan.expect_kept_choices) {
    expect(changed.length === 0, `checkboxes and selects kept their state: ${show(result.kept_choices)}`, changed.join('; '));
  } else {
    result.checks.push(`(recorded, not enforced) checkbox/select state after the re-render: ${show(result.kept_choices)}`);
  }
  noDialogs('after the re-render');
  await checkStructure(page, 'invalid page');
  await screenshot(page, plan, '02-invalid.png');

  // --- 3. corrections with the keyboard only -------------------------------------------------------
  for (const [name, value] of Object.entries(plan.second.fill ?? {})) {
    await focusTop(page);
    const presses = await tabTo(page, `#${fieldId(name)}`, byId(fieldId(name)));
    await page.keyboard.press('Control+A');
    await page.keyboard.type(value);
    const now = await page.locator(byId(fieldId(name))).inputValue();
    expect(now === value, `keyboard: reached #${fieldId(name)} with ${presses} Tab press(es), replaced its text by typing`,
      `its value is ${show(now)}`);
  }
  for (const name of plan.second.check ?? []) {
    await focusTop(page);
    const presses = await tabTo(page, `#${fieldId(name)}`, byId(fieldId(name)));
    const box = page.locator(byId(fieldId(name)));
    if (!(await box.isChecked())) await page.keyboard.press('Space');
    expect(await box.isChecked(), `keyboard: reached #${fieldId(name)} with ${presses} Tab press(es), checked it with Space`);
  }
  const presses = await tabTo(page, 'the submit button', SUBMIT);
  const done = await submit(page, () => page.keyboard.press('Enter'));
  result.statuses.push(done.status());
  expect(done.status() === 200, `keyboard: submitted with Enter on the submit button (${presses} Tab press(es)); answers 200`,
    `got ${done.status()} at ${done.url()}`);
  const headings = await page.locator('h1').allTextContents();
  expect(headings.some((h) => h.includes(plan.expect_done_heading)),
    `done page <h1> contains ${show(plan.expect_done_heading)}`, `<h1>s: ${show(headings)}`);
  noDialogs('on the done page');
  await checkStructure(page, 'done page');
  await screenshot(page, plan, '03-done.png');

  for (const visit of plan.then_visit ?? []) {
    const response = await page.goto(visit.url);
    result.statuses.push(response.status());
    expect(response.status() === 200, `GET ${visit.url} answers 200`, `got ${response.status()}`);
    const text = await page.locator('body').innerText();
    for (const wanted of visit.expect_text ?? []) {
      expect(text.includes(wanted), `${visit.url} shows ${show(wanted)}`);
    }
    const html = await page.content();
    for (const unwanted of visit.absent_text ?? []) {
      expect(!html.includes(unwanted), `${visit.url} does not contain ${show(unwanted)}`);
    }
    noDialogs(`on ${visit.url}`);
    await screenshot(page, plan, visit.screenshot);
  }
}

let plan;
try {
  plan = await readPlan();
} catch (error) {
  result.error = `bad plan: ${error.message}`;
  console.error(`fill_form: ${result.error}`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(2);
}
try {
  await run(plan);
  result.ok = true;
} catch (error) {
  // Playwright's messages carry a call log with terminal colours.
  result.error = String(error?.message ?? error).replace(/\u001b\[[0-9;]*m/g, '');
  if (!(error instanceof Failure) && error?.stack) console.error(error.stack);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
if (!result.ok) console.error(`fill_form: FAILED: ${result.error}`);
process.exitCode = result.ok ? 0 : 1;
