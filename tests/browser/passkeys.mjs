// Second factors in Debian's Chromium (issue 41), driven by playwright-core, with Chromium's
// virtual authenticator (the DevTools WebAuthn domain) as the user's passkey: the user signs in
// with a password, enrols an authenticator app (the QR page; the code computed here, RFC 6238),
// registers a passkey on the same page, signs out, then signs in to a client three ways through
// the authorization code flow: password + passkey, passkey alone (no password), password + TOTP
// code. Each sign-in's code is exchanged here for tokens; the ID token's claims and the access
// token's introspection go back in the summary (authserver/tests/browser.rs checks them).
// Screenshots of each step go to SCREENSHOT_DIR.
// Environment: BASE_URL, SCREENSHOT_DIR, USERNAME, PASSWORD, CLIENT_ID, CLIENT_SECRET,
// REDIRECT_URI (served here), INTROSPECTOR_ID, INTROSPECTOR_SECRET, CHROMIUM.

import assert from "node:assert/strict";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { join } from "node:path";
import {
  addVirtualAuthenticator, env, launchBrowser, prepareShots, runScenario, startWatchdog,
} from "./common.mjs";

const base = env("BASE_URL");
const shots = env("SCREENSHOT_DIR");
const username = env("USERNAME");
const password = env("PASSWORD");
const clientId = env("CLIENT_ID");
const clientSecret = env("CLIENT_SECRET");
const redirectUri = env("REDIRECT_URI");
const introspector = `Basic ${Buffer.from(`${env("INTROSPECTOR_ID")}:${env("INTROSPECTOR_SECRET")}`).toString("base64")}`;
prepareShots(shots, "passkeys");
const watchdog = startWatchdog();

/** The client's redirect URI, served here: each code that arrives goes to `onRedirect`. */
let onRedirect = () => {};
const client = createServer((request, response) => {
  onRedirect(new URL(request.url, redirectUri));
  response.writeHead(200, { "content-type": "text/plain" }).end("signed in");
});
await new Promise((resolve) => client.listen(Number(new URL(redirectUri).port), "127.0.0.1", resolve));

const shot = (page, name) => page.screenshot({ path: join(shots, name), fullPage: true });
const b64url = (bytes) => Buffer.from(bytes).toString("base64url");
const claimsOf = (jwt) => JSON.parse(Buffer.from(jwt.split(".")[1], "base64url").toString("utf8"));

/** RFC 4648 base32 (no padding) to bytes. */
function base32(text) {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let bits = 0, value = 0;
  const out = [];
  for (const c of text.replace(/=+$/, "").toUpperCase()) {
    value = (value << 5) | alphabet.indexOf(c);
    bits += 5;
    if (bits >= 8) { out.push((value >>> (bits - 8)) & 0xff); bits -= 8; }
  }
  return Buffer.from(out);
}

/** The RFC 6238 code (SHA-1, 6 digits, 30 s) of `secret` at `step`. */
function totp(secret, step) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(step));
  const mac = createHmac("sha1", secret).update(counter).digest();
  const at = mac[19] & 0xf;
  const number = (mac.readUInt32BE(at) & 0x7fffffff) % 1_000_000;
  return String(number).padStart(6, "0");
}
const stepNow = () => Math.floor(Date.now() / 1000 / 30);

async function signOut(page) {
  await page.goto(`${base}/o/authorized-tokens/`);
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL((url) => url.pathname === "/accounts/login/");
}

async function fillPassword(page) {
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
}

/**
 * An authorization request of the client: `signIn(page)` signs in on the way; the consent (if
 * asked) is given; the code that reaches the redirect URI is exchanged for tokens.
 */
async function authorize(page, signIn) {
  const verifier = b64url(randomBytes(32));
  const challenge = b64url(createHash("sha256").update(verifier).digest());
  const state = b64url(randomBytes(12));
  const codeArrived = new Promise((resolve) => { onRedirect = resolve; });
  const query = new URLSearchParams({
    response_type: "code", client_id: clientId, redirect_uri: redirectUri, scope: "openid read",
    state, nonce: b64url(randomBytes(12)), code_challenge: challenge, code_challenge_method: "S256",
  });
  await page.goto(`${base}/o/authorize/?${query}`);
  await page.waitForURL((url) => url.pathname === "/accounts/login/");
  await signIn(page);
  const allow = page.getByRole("button", { name: "Allow" });
  const first = await Promise.race([codeArrived, allow.waitFor().then(() => "consent")]);
  if (first === "consent") await allow.click();
  const url = await codeArrived;
  await page.waitForURL((at) => at.href.startsWith(redirectUri));
  assert.equal(url.searchParams.get("state"), state);
  const response = await fetch(`${base}/o/token/`, {
    method: "POST",
    headers: {
      authorization: `Basic ${Buffer.from(`${clientId}:${clientSecret}`).toString("base64")}`,
      "content-type": "application/x-www-form-urlencoded",
    },
    body: new URLSearchParams({
      grant_type: "authorization_code", code: url.searchParams.get("code"),
      redirect_uri: redirectUri, code_verifier: verifier,
    }),
  });
  const tokens = await response.json();
  assert.equal(response.status, 200, JSON.stringify(tokens));
  // Introspected now: signing out later revokes the tokens of the session.
  const introspected = await fetch(`${base}/o/introspect/`, {
    method: "POST",
    headers: { authorization: introspector, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: tokens.access_token }),
  });
  assert.equal(introspected.status, 200);
  return { id_token: claimsOf(tokens.id_token), introspection: await introspected.json() };
}

async function run(page) {
  const { devtools, authenticatorId } = await addVirtualAuthenticator(page);
  const summary = {};

  // Signed in with the password alone (no factor yet), the user opens the two-factor page.
  await page.goto(`${base}/accounts/two-factor/`);
  await page.waitForURL((url) => url.pathname === "/accounts/login/");
  await fillPassword(page);
  await page.waitForLoadState();
  await page.goto(`${base}/accounts/two-factor/`);
  await page.locator("#totp-qr").waitFor();
  await shot(page, "two-factor-enrol-totp.png");
  const secret = base32(await page.locator("#totp-secret").textContent());
  // Confirmed with the code of the step before (one step of drift): the current step's code is
  // left for the sign-in below.
  const confirmStep = stepNow() - 1;
  await page.getByLabel("Code from the app").fill(totp(secret, confirmStep));
  await page.getByRole("button", { name: "Confirm" }).click();
  await page.locator("#recovery-codes").waitFor();
  summary.recovery_codes = await page.locator("#recovery-codes li").count();
  await shot(page, "two-factor-recovery-codes.png");

  // A passkey, named, registered from the same page.
  await page.goto(`${base}/accounts/two-factor/`);
  await page.getByLabel("Name of the new passkey").fill("Virtual authenticator");
  await page.getByRole("button", { name: "Add a passkey" }).click();
  await page.locator("#passkeys .passkey-name").first().waitFor();
  summary.passkeys_listed = await page.locator("#passkeys .passkey-name").allTextContents();
  const { credentials } = await devtools.send("WebAuthn.getCredentials", { authenticatorId });
  summary.credentials = credentials.length;
  summary.resident = credentials.every((c) => c.isResidentCredential);
  await shot(page, "two-factor-passkey-registered.png");
  await signOut(page);

  // 1. Password, then the passkey at the factor step.
  summary.password_and_passkey = await authorize(page, async (page) => {
    await fillPassword(page);
    await page.waitForURL((url) => url.pathname === "/accounts/login/code/");
    await page.locator("#passkey-form").waitFor();
    summary.factor_step_offers = {
      passkey: await page.locator("#passkey-form").isVisible(),
      code: await page.locator("#code-form").isVisible(),
    };
    await shot(page, "sign-in-factor-step.png");
    await page.getByRole("button", { name: "Use a passkey" }).click();
  });
  await signOut(page);

  // 2. No password: the discoverable passkey, the user verified by the authenticator.
  await shot(page, "sign-in-passwordless.png");
  summary.passkey_alone = await authorize(page, async (page) => {
    await page.getByRole("button", { name: "Continue with a passkey" }).click();
  });
  await signOut(page);

  // 3. Password, then a code of the authenticator app.
  summary.password_and_totp = await authorize(page, async (page) => {
    await fillPassword(page);
    await page.waitForURL((url) => url.pathname === "/accounts/login/code/");
    let step = stepNow();
    if (step <= confirmStep) step = confirmStep + 1;
    await page.getByLabel("Code").fill(totp(secret, step));
    await shot(page, "sign-in-totp-code.png");
    await page.getByRole("button", { name: "Verify" }).click();
  });

  // The counter the virtual authenticator keeps went up with each use.
  const after = await devtools.send("WebAuthn.getCredentials", { authenticatorId });
  summary.sign_count = after.credentials[0].signCount;
  return summary;
}

const browser = await launchBrowser();
await runScenario({ browser, watchdog, shots, scenario: "passkeys", run, cleanup: () => client.close() });
