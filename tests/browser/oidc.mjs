// OpenID Connect (issue 26) in Debian's Chromium, driven by playwright-core: "Sign in with
// tokengate" on a small relying party served here with node's http module. The user signs in,
// sees the consent page naming the claims, lands on the relying party's signed-in page (its
// back end exchanged the code, verified the RS256 ID token against the JWKS with node's crypto,
// checked iss, aud, nonce, exp and at_hash, and read UserInfo), then signs out through
// RP-initiated logout and comes back to the registered post-logout URI with the state; a
// prompt=none request afterwards answers login_required.
// Started by authserver/tests/browser.rs, which reads the last line printed (a JSON summary).
// Environment: BASE_URL, ISSUER, SCREENSHOT_DIR, CLIENT_ID, CLIENT_SECRET, APP_NAME, CLIENT_PORT,
// RESOURCE_OWNER, RESOURCE_OWNER_PASSWORD, CHROMIUM.

import assert from "node:assert/strict";
import { createHash, createPublicKey, randomBytes, verify } from "node:crypto";
import { createServer } from "node:http";
import { join } from "node:path";
import { env, launchBrowser, prepareShots, runScenario, startWatchdog } from "./common.mjs";

const base = env("BASE_URL");
const issuer = env("ISSUER");
const shots = env("SCREENSHOT_DIR");
const clientId = env("CLIENT_ID");
const clientSecret = env("CLIENT_SECRET");
const appName = env("APP_NAME");
const clientBase = `http://127.0.0.1:${Number(env("CLIENT_PORT"))}`;
const redirectUri = `${clientBase}/callback`;
const signedOutUri = `${clientBase}/signed-out`;
prepareShots(shots, "oidc");
const watchdog = startWatchdog();

const b64url = (bytes) => Buffer.from(bytes).toString("base64url");
const json64 = (part) => JSON.parse(Buffer.from(part, "base64url").toString("utf8"));
const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const page = (title, body) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title></head>` +
  `<body><main><h1 id="result">${escape(title)}</h1>${body}</main></body></html>`;

/** state -> { verifier, nonce } of the sign-ins this relying party started. */
const pending = new Map();
/** The relying party's one session: the ID token and UserInfo of the signed-in user. */
const rp = { session: null, logoutState: null, lastState: null, checks: [] };

/** The ID token's claims once its signature verifies with the JWKS key its kid names. */
async function verifiedClaims(idToken, nonce, accessToken) {
  const [head, body, signature] = idToken.split(".");
  const header = json64(head);
  assert.equal(header.alg, "RS256");
  const jwks = await (await fetch(`${base}/.well-known/jwks.json`)).json();
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  assert.ok(jwk, `the JWKS has kid ${header.kid}`);
  const key = createPublicKey({ key: jwk, format: "jwk" });
  assert.ok(verify("RSA-SHA256", Buffer.from(`${head}.${body}`), key, Buffer.from(signature, "base64url")), "RS256 signature");
  const claims = json64(body);
  const now = Math.floor(Date.now() / 1000);
  assert.equal(claims.iss, issuer);
  assert.equal(claims.aud, clientId);
  assert.equal(claims.nonce, nonce);
  assert.ok(claims.exp > now && claims.iat <= now + 5 && claims.auth_time <= claims.iat);
  const digest = createHash("sha256").update(accessToken).digest();
  assert.equal(claims.at_hash, b64url(digest.subarray(0, 16)));
  rp.checks.push("signature", "iss", "aud", "nonce", "exp", "at_hash");
  return claims;
}

async function callback(url) {
  const query = url.searchParams;
  const started = pending.get(query.get("state") ?? "");
  pending.delete(query.get("state") ?? "");
  if (query.has("error")) return page("sign-in refused", `<p id="error">${escape(query.get("error"))}</p>`);
  assert.ok(started, "the state is one this relying party sent");
  const response = await fetch(`${base}/o/token/`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      authorization: `Basic ${Buffer.from(`${clientId}:${clientSecret}`).toString("base64")}`,
    },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: query.get("code") ?? "",
      redirect_uri: redirectUri,
      code_verifier: started.verifier,
    }),
  });
  const token = await response.json();
  assert.equal(response.status, 200, JSON.stringify(token));
  const claims = await verifiedClaims(token.id_token, started.nonce, token.access_token);
  const userinfo = await (await fetch(`${base}/o/userinfo/`, { headers: { authorization: `Bearer ${token.access_token}` } })).json();
  assert.equal(userinfo.sub, claims.sub);
  rp.session = { idToken: token.id_token, claims, userinfo };
  return page(
    `Hello ${userinfo.name}`,
    `<p id="email">${escape(userinfo.email)}</p><p id="sub">sub=${escape(claims.sub)}</p>` +
      `<p><a id="logout" href="/logout">Sign out</a></p>`,
  );
}

const server = createServer(async (request, response) => {
  const url = new URL(request.url, clientBase);
  try {
    if (url.pathname === "/start") {
      const state = b64url(randomBytes(16));
      const verifier = b64url(randomBytes(32));
      const nonce = b64url(randomBytes(16));
      pending.set(state, { verifier, nonce });
      rp.lastState = state;
      const authorize = new URL("/o/authorize/", base);
      authorize.search = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: redirectUri,
        scope: "openid profile email",
        state,
        nonce,
        code_challenge: b64url(createHash("sha256").update(verifier).digest()),
        code_challenge_method: "S256",
        ...(url.searchParams.get("prompt") ? { prompt: url.searchParams.get("prompt") } : {}),
      }).toString();
      response.writeHead(302, { location: authorize.href }).end();
    } else if (url.pathname === "/callback") {
      response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(await callback(url));
    } else if (url.pathname === "/logout") {
      rp.logoutState = b64url(randomBytes(8));
      const logout = new URL("/o/logout/", base);
      logout.search = new URLSearchParams({
        id_token_hint: rp.session.idToken,
        post_logout_redirect_uri: signedOutUri,
        state: rp.logoutState,
      }).toString();
      rp.session = null;
      response.writeHead(302, { location: logout.href }).end();
    } else if (url.pathname === "/signed-out") {
      const ok = url.searchParams.get("state") === rp.logoutState;
      response
        .writeHead(200, { "content-type": "text/html; charset=utf-8" })
        .end(page("signed out", `<p id="state-check">${ok ? "state matches" : "unknown state"}</p>`));
    } else {
      response.writeHead(404).end("not found");
    }
  } catch (error) {
    response.writeHead(500, { "content-type": "text/plain" }).end(String(error?.stack ?? error));
  }
});
await new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(Number(env("CLIENT_PORT")), "127.0.0.1", resolve);
});

const browser = await launchBrowser();
const text = async (page, selector) => ((await page.locator(selector).textContent()) ?? "").trim();

async function signInWithOidc(page) {
  await page.goto(`${clientBase}/start`);
  assert.equal(new URL(page.url()).pathname, "/accounts/login/", "anonymous: the sign-in page");
  await page.getByLabel("Username").fill(env("RESOURCE_OWNER"));
  await page.getByLabel("Password").fill(env("RESOURCE_OWNER_PASSWORD"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((url) => url.pathname === "/o/authorize/");
  // The consent page names the application and the claims each scope releases.
  const shown = await page.textContent("main");
  assert.ok(shown.includes(appName), "the consent page names the application");
  for (const claim of ["preferred_username", "email_verified", "openid"]) {
    assert.ok(shown.includes(claim), `the consent page shows ${claim}`);
  }
  await page.screenshot({ path: join(shots, "oidc-consent.png"), fullPage: true });
  await page.getByRole("button", { name: "Allow" }).click();
  await page.waitForURL((url) => url.href.startsWith(`${redirectUri}?`));
  assert.equal(await text(page, "#result"), "Hello Alice Liddell", await page.textContent("main"));
  assert.equal(await text(page, "#email"), "alice@wonderland.example");
  await page.screenshot({ path: join(shots, "oidc-signed-in.png"), fullPage: true });
  const sub = rp.session.claims.sub;

  // RP-initiated logout: the hint names the signed-in user, so no confirmation page.
  await page.getByRole("link", { name: "Sign out" }).click();
  await page.waitForURL((url) => url.href.startsWith(`${signedOutUri}?`));
  assert.equal(await text(page, "#state-check"), "state matches");
  await page.screenshot({ path: join(shots, "oidc-signed-out.png"), fullPage: true });

  // The session here is over: a silent sign-in is refused.
  await page.goto(`${clientBase}/start?prompt=none`);
  await page.waitForURL((url) => url.href.startsWith(`${redirectUri}?`));
  assert.equal(await text(page, "#error"), "login_required");
  return { sub, checks: rp.checks };
}

await runScenario({ browser, watchdog, shots, scenario: "oidc", run: signInWithOidc, cleanup: () => server.close() });
