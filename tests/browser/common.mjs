// What the browser scripts (views.mjs, authorize.mjs, passkeys.mjs) share: their settings from
// the environment, a watchdog, Debian's Chromium launched headless on a throwaway profile, its
// virtual WebAuthn authenticator, and the run of a scenario in it.

import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The environment variable `name`, which must be set. */
export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
};

/** Makes the screenshot directory and removes an earlier `failure-${scenario}.png` from it. */
export function prepareShots(shots, scenario) {
  mkdirSync(shots, { recursive: true });
  rmSync(join(shots, `failure-${scenario}.png`), { force: true });
}

/** Never hang a test run: the whole scenario gets two minutes. */
export function startWatchdog() {
  return setTimeout(() => {
    console.error("browser scenario timed out");
    process.exit(2);
  }, 120_000);
}

/** Chromium on a fresh profile: `{ context, profile }`. */
export async function launchBrowser() {
  const profile = mkdtempSync(join(tmpdir(), "tokengate-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1200, height: 800 },
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  context.setDefaultTimeout(15_000);
  return { context, profile };
}

/**
 * Runs `run` on the first tab of `browser` (of [`launchBrowser`]) and prints its result, the
 * JSON summary; on failure saves `failure-${scenario}.png` in `shots`. Then closes the browser,
 * removes its profile, runs `cleanup`, stops the `watchdog` and exits: 1 when it failed.
 */
export async function runScenario({ browser, watchdog, shots, scenario, run, cleanup = () => {} }) {
  const { context, profile } = browser;
  let failed = false;
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    try {
      console.log(JSON.stringify(await run(page)));
    } catch (error) {
      await page.screenshot({ path: join(shots, `failure-${scenario}.png`), fullPage: true }).catch(() => {});
      throw error;
    }
  } catch (error) {
    failed = true;
    console.error(error);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    cleanup();
    clearTimeout(watchdog);
  }
  process.exit(failed ? 1 : 0);
}

/**
 * Gives `page` Chromium's virtual authenticator (the DevTools WebAuthn domain): a platform
 * authenticator speaking CTAP2 that holds discoverable credentials and verifies its user, so
 * `navigator.credentials` answers without a person. Returns the DevTools session and the
 * authenticator's id (for `WebAuthn.getCredentials`).
 */
export async function addVirtualAuthenticator(page) {
  const devtools = await page.context().newCDPSession(page);
  await devtools.send("WebAuthn.enable", { enableUI: false });
  const { authenticatorId } = await devtools.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { devtools, authenticatorId };
}
