// Headless Chromium as the browser scripts (fill_form.mjs, walk.mjs) drive it: $GATEHOUSE_CHROMIUM,
// else Debian's /usr/bin/chromium (nothing is downloaded), with pages the size of a small screen.
// Staged beside them by `scripts/npm-stage`.
import { chromium } from 'playwright-core';

const LAUNCH_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking'];

export function launch() {
  const executablePath = process.env.GATEHOUSE_CHROMIUM || '/usr/bin/chromium';
  return chromium.launch({ executablePath, headless: true, args: LAUNCH_ARGS });
}

/** A page of its own browser context (its own cookies) in `browser`, `viewport` wide and high. */
export async function newPage(browser, viewport = { width: 1024, height: 768 }) {
  const context = await browser.newContext({ viewport });
  return context.newPage();
}
