// The authorization code flow with PKCE (issue 13) in Debian's Chromium, driven by playwright-core:
// an ordinary user signs in, sees the consent page, denies, allows, is not asked again, may not
// open the operator views, and revokes the application on "Authorized applications".
//
// The client is a small web application served here with node's http module on the loopback
// port the Rust test chose and registered (REDIRECT_URI = http://127.0.0.1:CLIENT_PORT/callback):
// /start makes the state and the PKCE verifier and sends the browser to /o/authorize/; /callback
// checks the state, exchanges the code at /o/token/ with the verifier (a confidential client: its
// back end authenticates with HTTP Basic) and shows the outcome. Started by authserver/tests/browser.rs, which reads the last
// line printed (a JSON summary).
// Environment: BASE_URL, ISSUER, SCREENSHOT_DIR, CLIENT_ID, CLIENT_SECRET, APP_NAME, CLIENT_PORT, REDIRECT_URI,
// RESOURCE_OWNER, RESOURCE_OWNER_PASSWORD (an active non-staff user), CHROMIUM.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { join } from "node:path";
import { env, launchBrowser, prepareShots, runScenario, startWatchdog } from "./common.mjs";

const base = env("BASE_URL");
const issuer = env("ISSUER");
const shots = env("SCREENSHOT_DIR");
const clientId = env("CLIENT_ID");
const clientSecret = env("CLIENT_SECRET");
const formEncode = (value) => new URLSearchParams({ v: value }).toString().slice(2);
const appName = env("APP_NAME");
const clientPort = Number(env("CLIENT_PORT"));
const redirectUri = env("REDIRECT_URI");
const clientBase = `http://127.0.0.1:${clientPort}`;
assert.equal(new URL(redirectUri).origin, clientBase, "REDIRECT_URI is served here");
prepareShots(shots, "authorize");

const watchdog = startWatchdog();

// ---- The test client ------------------------------------------------------------------------

const b64url = (bytes) => Buffer.from(bytes).toString("base64url");
const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

/** state -> PKCE verifier of the authorizations this client started. */
const pending = new Map();
/** The state of the latest /start, and every token response the client received. */
const client = { lastState: null, tokens: [] };

function clientPage(title, body) {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title></head>` +
    `<body><main><h1 id="result">${escape(title)}</h1>${body}</main></body></html>`;
}

async function callback(url) {
  const query = url.searchParams;
  const state = query.get("state") ?? "";
  const verifier = pending.get(state);
  pending.delete(state);
  const facts =
    `<p id="state">state=${escape(state)}</p>` +
    `<p id="state-check">${verifier ? "state matches" : "unknown state"}</p>` +
    `<p id="iss">iss=${escape(query.get("iss") ?? "")}</p>`;
  if (query.has("error")) {
    return clientPage("authorization refused", `<p id="error">error=${escape(query.get("error"))}</p>${facts}`);
  }
  if (!verifier) return clientPage("exchange refused", facts);
  const response = await fetch(`${base}/o/token/`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      // RFC 6749 §2.3.1: each part form-encoded, then base64.
      authorization: `Basic ${Buffer.from(`${formEncode(clientId)}:${formEncode(clientSecret)}`).toString("base64")}`,
    },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: query.get("code") ?? "",
      redirect_uri: redirectUri,
      code_verifier: verifier,
    }),
  });
  const text = await response.text();
  if (response.status !== 200) {
    return clientPage("exchange failed", `<pre id="answer">${response.status} ${escape(text)}</pre>${facts}`);
  }
  const token = JSON.parse(text);
  client.tokens.push(token);
  return clientPage(
    "exchange succeeded",
    `<p id="scope">scope=${escape(token.scope)}</p>` +
      `<p id="refresh">${token.refresh_token ? "with a refresh token" : "no refresh token"}</p>${facts}`,
  );
}

const server = createServer(async (request, response) => {
  const url = new URL(request.url, clientBase);
  try {
    if (url.pathname === "/start") {
      const state = b64url(randomBytes(16));
      const verifier = b64url(randomBytes(32));
      pending.set(state, verifier);
      client.lastState = state;
      const authorize = new URL("/o/authorize/", base);
      authorize.search = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: redirectUri,
        scope: url.searchParams.get("scope") ?? "read",
        state,
        code_challenge: b64url(createHash("sha256").update(verifier).digest()),
        code_challenge_method: "S256",
      }).toString();
      response.writeHead(302, { location: authorize.href }).end();
    } else if (url.href.split("?")[0] === redirectUri) {
      const html = await callback(url);
      response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(html);
    } else {
      response.writeHead(404).end("not found");
    }
  } catch (error) {
    response.writeHead(500, { "content-type": "text/plain" }).end(String(error?.stack ?? error));
  }
});
await new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(clientPort, "127.0.0.1", resolve);
});

// ---- The browser ----------------------------------------------------------------------------

const browser = await launchBrowser();

const text = async (page, selector) => ((await page.locator(selector).textContent()) ?? "").trim();

/** Starts an authorization at the client for `scope`; returns the state it made. */
async function start(page, scope) {
  await page.goto(`${clientBase}/start?scope=${encodeURIComponent(scope)}`);
  return client.lastState;
}

async function expectConsentPage(page, scopes) {
  assert.equal(new URL(page.url()).pathname, "/o/authorize/", `the consent page, not ${page.url()}`);
  const form = page.locator('form#consent[method="post" i][action="/o/authorize/"]');
  await form.waitFor();
  const shown = await page.textContent("main");
  assert.ok(shown.includes(appName), `the consent page names the application ${appName}`);
  for (const scope of scopes) assert.match(shown, new RegExp(scope, "i"), `the consent page shows ${scope}`);
  assert.equal(await form.locator('input[type="hidden"][name="csrfmiddlewaretoken"]').count(), 1, "CSRF token");
  for (const name of ["response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"]) {
    assert.equal(await form.locator(`input[type="hidden"][name="${name}"]`).count(), 1, `hidden input ${name}`);
  }
  await form.locator('button[type="submit"][name="decision"][value="allow"]').waitFor();
  await form.locator('button[type="submit"][name="decision"][value="deny"]').waitFor();
}

/** Asserts the client page after the redirect back; returns its query. */
async function atClient(page, state) {
  await page.waitForURL((url) => url.href.startsWith(`${redirectUri}?`));
  const query = new URL(page.url()).searchParams;
  assert.equal(query.get("state"), state, "the redirect carries the state the client sent");
  assert.equal(query.get("iss"), issuer, "the redirect carries iss (RFC 9207)");
  assert.equal(await text(page, "#state"), `state=${state}`);
  assert.equal(await text(page, "#state-check"), "state matches");
  assert.equal(await text(page, "#iss"), `iss=${issuer}`);
  return query;
}

async function authorize(page) {
  const username = env("RESOURCE_OWNER");

  // Anonymous: the authorization sends the browser to sign in, and back.
  const deniedState = await start(page, "read");
  assert.equal(new URL(page.url()).pathname, "/accounts/login/", "anonymous visits land on the sign-in page");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(env("RESOURCE_OWNER_PASSWORD"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((url) => url.pathname === "/o/authorize/");
  await expectConsentPage(page, ["read"]);
  await page.screenshot({ path: join(shots, "authorize-consent.png"), fullPage: true });

  // Deny: back at the client with access_denied and the state, no code.
  await page.getByRole("button", { name: "Deny" }).click();
  const denied = await atClient(page, deniedState);
  assert.equal(denied.get("error"), "access_denied");
  assert.equal(denied.has("code"), false);
  assert.equal(await text(page, "#result"), "authorization refused");
  assert.equal(await text(page, "#error"), "error=access_denied");
  await page.screenshot({ path: join(shots, "authorize-denied.png"), fullPage: true });

  // A denial is not remembered: asked again, this time for more, and allowed.
  const allowedState = await start(page, "read write");
  await expectConsentPage(page, ["read", "write"]);
  await page.getByRole("button", { name: "Allow" }).click();
  const allowed = await atClient(page, allowedState);
  assert.ok(allowed.get("code"), "a code");
  assert.equal(await text(page, "#result"), "exchange succeeded", await page.textContent("main"));
  assert.equal(await text(page, "#scope"), "scope=read write");
  assert.equal(await text(page, "#refresh"), "with a refresh token");
  await page.screenshot({ path: join(shots, "authorize-exchanged.png"), fullPage: true });

  // Consent is remembered: the same or fewer scopes skip the page.
  const rememberedState = await start(page, "read");
  assert.ok(page.url().startsWith(`${redirectUri}?`), `no consent page the second time (at ${page.url()})`);
  await atClient(page, rememberedState);
  assert.equal(await text(page, "#result"), "exchange succeeded", await page.textContent("main"));
  assert.equal(await text(page, "#scope"), "scope=read");

  // Signed out and back in with the consent remembered: the sign-in form's redirect chain ends at
  // the client (its form-action allows that origin), with no consent page on the way.
  await page.goto(`${base}/o/authorized-tokens/`);
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL((url) => url.pathname === "/accounts/login/");
  const againState = await start(page, "read");
  assert.equal(new URL(page.url()).pathname, "/accounts/login/", "signed out: the sign-in page again");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(env("RESOURCE_OWNER_PASSWORD"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await atClient(page, againState);
  assert.equal(await text(page, "#result"), "exchange succeeded", await page.textContent("main"));
  assert.equal(await text(page, "#scope"), "scope=read");

  // The operator views stay staff-only.
  for (const path of ["/o/applications/", "/admin/"]) {
    const response = await page.goto(`${base}${path}`);
    assert.equal(response.status(), 403, `${path} for a non-staff user`);
  }

  // Authorized applications: this one is listed with a revoke form; revoking it ends the consent.
  await page.goto(`${base}/o/authorized-tokens/`);
  const main = page.locator("main");
  assert.ok((await main.textContent()).includes(appName), "the authorized application is listed");
  const revoke = main.locator('form[method="post" i]');
  assert.equal(await revoke.count(), 1, "one revoke form for the one authorized application");
  assert.equal(await revoke.locator('input[type="hidden"][name="csrfmiddlewaretoken"]').count(), 1, "CSRF token");
  await page.screenshot({ path: join(shots, "authorized-applications.png"), fullPage: true });
  const [revoked] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && r.url().startsWith(base)),
    revoke.locator('button, input[type="submit"]').first().click(),
  ]);
  assert.ok(revoked.status() < 400, `the revoke POST answered ${revoked.status()}`);
  await page.waitForLoadState();
  await page.goto(`${base}/o/authorized-tokens/`);
  assert.ok(!(await page.locator("main").textContent()).includes(appName), "the application is no longer listed");
  await start(page, "read");
  await expectConsentPage(page, ["read"]);

  return { tokens: client.tokens.map((t) => t.access_token), refresh_tokens: client.tokens.map((t) => t.refresh_token) };
}

await runScenario({
  browser,
  watchdog,
  shots,
  scenario: "authorize",
  run: authorize,
  cleanup: () => server.close(),
});
