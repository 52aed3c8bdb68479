// CORS in Debian's Chromium, driven by playwright-core (issue 27): a single-page application on
// origin A (a public client, PKCE) signs its user in at the authorization server, exchanges the
// code at /o/token/ from the page with fetch(), and calls the API through the proxy with the
// token; a page on origin C, which neither lists, tries the same calls and the browser refuses
// them. Started by tests/cors_browser.rs, which reads the last line printed (a JSON summary).
// Environment: AUTH_URL, PROXY_URL, API_PATH, CLIENT_ID, APP_PORT, OTHER_PORT, RESOURCE_OWNER,
// RESOURCE_OWNER_PASSWORD, SCREENSHOT_DIR, CHROMIUM.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { join } from "node:path";
import { env, launchBrowser, prepareShots, runScenario, startWatchdog } from "./common.mjs";

const auth = env("AUTH_URL");
const proxy = env("PROXY_URL");
const apiPath = env("API_PATH");
const clientId = env("CLIENT_ID");
const appBase = `http://127.0.0.1:${Number(env("APP_PORT"))}`;
const otherBase = `http://127.0.0.1:${Number(env("OTHER_PORT"))}`;
const shots = env("SCREENSHOT_DIR");
prepareShots(shots, "cors");
const watchdog = startWatchdog();

// ---- The single-page application: one HTML page, all of its OAuth in the browser ------------

const spa = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>SPA</title></head>
<body><main><h1>SPA</h1><pre id="result">working</pre></main><script type="module">
const auth = ${JSON.stringify(auth)}, proxy = ${JSON.stringify(proxy)};
const apiPath = ${JSON.stringify(apiPath)}, clientId = ${JSON.stringify(clientId)};
const redirectUri = location.origin + "/callback";
const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
const show = (result) => { document.getElementById("result").textContent = JSON.stringify(result); };
const query = new URLSearchParams(location.search);
if (location.pathname === "/") {
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem("pkce", JSON.stringify({ verifier, state }));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  location.assign(auth + "/o/authorize/?" + new URLSearchParams({
    response_type: "code", client_id: clientId, redirect_uri: redirectUri, scope: "read groups",
    state, code_challenge: challenge, code_challenge_method: "S256" }));
} else if (location.pathname === "/callback") {
  const { verifier, state } = JSON.parse(sessionStorage.getItem("pkce"));
  try {
    if (query.get("state") !== state) throw new Error("state mismatch");
    const tokenAnswer = await fetch(auth + "/o/token/", { method: "POST", body: new URLSearchParams({
      grant_type: "authorization_code", code: query.get("code"), redirect_uri: redirectUri,
      client_id: clientId, code_verifier: verifier }) });
    const token = await tokenAnswer.json();
    // Authorization is no safelisted header: this call is preflighted.
    const api = await fetch(proxy + apiPath, { headers: { authorization: "Bearer " + token.access_token } });
    const refused = await fetch(proxy + apiPath);
    show({ token_status: tokenAnswer.status, access_token: token.access_token, scope: token.scope,
           api_status: api.status, api: await api.json(), refused_status: refused.status,
           refused_challenge: refused.headers.get("www-authenticate") });
  } catch (error) {
    show({ error: String(error) });
  }
}
</script></body></html>`;

function listen(port, handler) {
  const server = createServer(handler);
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });
}
const page = (response) => response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
const app = await listen(Number(env("APP_PORT")), (request, response) => {
  const path = new URL(request.url, appBase).pathname;
  if (path === "/" || path === "/callback") page(response).end(spa);
  else response.writeHead(404).end();
});
const other = await listen(Number(env("OTHER_PORT")), (request, response) =>
  page(response).end("<!doctype html><html lang=\"en\"><head><title>other</title></head><body>other</body></html>"),
);

// ---- The browser ----------------------------------------------------------------------------

/** What fetch() gives a page: the status, or the name of the error the browser threw. */
async function tryFetch(tab, url, init) {
  return tab.evaluate(async ([url, init]) => {
    try {
      const response = await fetch(url, init);
      return { status: response.status, text: await response.text() };
    } catch (error) {
      return { blocked: error.name };
    }
  }, [url, init]);
}

async function run(tab) {
  const failedRequests = [];
  tab.on("requestfailed", (r) => failedRequests.push(r.url()));

  // Origin A: the whole code flow, the token exchange and the API call from the page.
  await tab.goto(`${appBase}/`);
  await tab.waitForURL((url) => url.pathname === "/accounts/login/");
  await tab.getByLabel("Username").fill(env("RESOURCE_OWNER"));
  await tab.getByLabel("Password").fill(env("RESOURCE_OWNER_PASSWORD"));
  await tab.getByRole("button", { name: "Sign in" }).click();
  await tab.waitForURL((url) => url.pathname === "/o/authorize/");
  await tab.getByRole("button", { name: "Allow" }).click();
  await tab.waitForURL((url) => url.href.startsWith(`${appBase}/callback?`));
  await tab.waitForFunction(() => document.getElementById("result").textContent !== "working");
  const result = JSON.parse(await tab.locator("#result").textContent());
  await tab.screenshot({ path: join(shots, "cors-spa.png"), fullPage: true });
  assert.equal(result.error, undefined, `the SPA failed: ${result.error}`);
  assert.equal(result.token_status, 200);
  assert.equal(result.api_status, 200);
  assert.equal(result.refused_status, 401, "a refusal is readable by an allowed origin");
  const token = result.access_token;

  // Origin A may also read the metadata (any origin may).
  const metadata = await tryFetch(tab, `${auth}/.well-known/oauth-authorization-server`, {});
  assert.equal(metadata.status, 200);

  // Origin C: the same calls, with the same valid token; the browser refuses to hand over the
  // answers (the preflight to the proxy is refused, the token answer has no CORS header).
  await tab.goto(`${otherBase}/`);
  const otherApi = await tryFetch(tab, proxy + apiPath, { headers: { authorization: `Bearer ${token}` } });
  const otherToken = await tryFetch(tab, `${auth}/o/token/`, {
    method: "POST",
    body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: "x", client_id: clientId }),
  });
  const otherMetadata = await tryFetch(tab, `${auth}/.well-known/oauth-authorization-server`, {});
  assert.equal(otherApi.blocked, "TypeError", `origin C read the API: ${JSON.stringify(otherApi)}`);
  assert.equal(otherToken.blocked, "TypeError", `origin C read the token endpoint: ${JSON.stringify(otherToken)}`);
  assert.equal(otherMetadata.status, 200, "the metadata is for anyone");
  return {
    token_status: result.token_status,
    scope: result.scope,
    api_status: result.api_status,
    api: result.api,
    refused_challenge: result.refused_challenge,
    other_api: otherApi,
    other_token: otherToken,
    other_metadata_status: otherMetadata.status,
    failed_requests: failedRequests,
  };
}

await runScenario({
  browser: await launchBrowser(),
  watchdog,
  shots,
  scenario: "cors",
  run,
  cleanup: () => {
    app.close();
    other.close();
  },
});
