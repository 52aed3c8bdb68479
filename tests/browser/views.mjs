// Drives Debian's Chromium through the authorization server's views with playwright-core.
// Started by authserver/tests/browser.rs, which runs the server and reads the last line printed
// (a JSON summary). Usage: node views.mjs applications|admin, with the settings in the environment.

import assert from "node:assert/strict";
import { join } from "node:path";
import { env, launchBrowser, prepareShots, runScenario, startWatchdog } from "./common.mjs";

const scenario = process.argv[2];
const base = env("BASE_URL");
const shots = env("SCREENSHOT_DIR");
prepareShots(shots, scenario);

const watchdog = startWatchdog();

const browser = await launchBrowser();
const { context } = browser;

async function token(clientId, secret, username, password) {
  const response = await fetch(`${base}/o/token/`, {
    method: "POST",
    headers: {
      authorization: "Basic " + Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`).toString("base64"),
      "content-type": "application/x-www-form-urlencoded",
    },
    body: new URLSearchParams({ grant_type: "password", username, password }),
  });
  return { status: response.status, body: await response.json() };
}

async function signIn(page, username, password) {
  assert.match(new URL(page.url()).pathname, /^\/accounts\/login\/$/, "anonymous visits land on the sign-in page");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForLoadState();
}

async function applications(page) {
  const owner = { username: env("RESOURCE_OWNER"), password: env("RESOURCE_OWNER_PASSWORD") };
  await page.goto(`${base}/o/applications/register/`);
  await signIn(page, env("OPERATOR"), env("OPERATOR_PASSWORD"));
  assert.equal(new URL(page.url()).pathname, "/o/applications/register/", "sign-in comes back to the page asked for");

  // Only the chosen grant type's fields: the authorization code section (redirect URIs, PKCE,
  // OpenID Connect) appears when that grant is picked, and goes when another is.
  const grant = page.getByLabel("Authorization grant type");
  for (const [value, shown] of [["password", false], ["client-credentials", false], ["authorization-code", true]]) {
    await grant.selectOption(value);
    assert.equal(await page.locator("#redirect_uris").isVisible(), shown, `redirect URIs with ${value}`);
    assert.equal(await page.locator("#id_token_alg").isVisible(), shown, `ID-token algorithm with ${value}`);
    assert.equal(await page.locator("#pkce_optional").isVisible(), shown, `PKCE with ${value}`);
    await page.screenshot({ path: join(shots, `application-form-${value}.png`), fullPage: true });
  }

  // A refused form comes back with the message beside the field.
  await page.getByLabel("Name").fill("Browser app");
  await page.getByLabel("Authorization grant type").selectOption("authorization-code");
  await page.getByRole("button", { name: "Save" }).click();
  await page.locator("#redirect_uris-error").waitFor();
  assert.equal(await page.getByLabel("Name").inputValue(), "Browser app");
  await page.screenshot({ path: join(shots, "application-form-errors.png"), fullPage: true });

  await page.getByLabel("Client type").selectOption("confidential");
  await page.getByLabel("Authorization grant type").selectOption({ label: "Resource owner password-based" });
  await page.locator('input[name=scope][value=read]').check();
  await page.locator('input[name=scope][value=write]').check();
  await page.getByRole("button", { name: "Save" }).click();
  await page.locator("#client-secret").waitFor();
  assert.match(await page.textContent("body"), /will not be shown again/);
  const clientId = await page.locator("#client-id").inputValue();
  const secret = await page.locator("#client-secret").inputValue();
  assert.equal(secret.length, 43);
  await page.screenshot({ path: join(shots, "application-registered.png"), fullPage: true });

  // The copy button puts the secret on the clipboard.
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  await page.locator('button[data-copy="client-secret"]').click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);

  // The page after registering was reached by a redirect: a reload registers nothing more
  // and shows the secret no more.
  await page.reload();
  await page.locator("#secret-fingerprint").waitFor();
  assert.equal(await page.locator("#client-secret").count(), 0);
  assert.doesNotMatch(await page.content(), new RegExp(secret));

  // The credentials work for a real password grant.
  const granted = await token(clientId, secret, owner.username, owner.password);
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  assert.equal(granted.body.scope, "read write");

  // The list, on a desktop and on a phone; the secret is not shown again.
  await page.getByRole("navigation").getByRole("link", { name: "Applications" }).click();
  await page.getByRole("link", { name: "Browser app" }).waitFor();
  await page.screenshot({ path: join(shots, "applications-list.png"), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: join(shots, "applications-list-phone.png"), fullPage: true });
  await page.setViewportSize({ width: 1200, height: 800 });
  await page.getByRole("link", { name: "Browser app" }).click();
  assert.equal(await page.locator("#client-secret").count(), 0);
  assert.doesNotMatch(await page.content(), new RegExp(secret));
  await page.locator("#secret-fingerprint").waitFor();

  // Update.
  await page.getByRole("link", { name: "Edit" }).click();
  await page.getByLabel("Name").fill("Browser app v2");
  await page.getByLabel("May introspect tokens").check();
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("heading", { name: "Browser app v2" }).waitFor();
  assert.equal((await page.locator("#notice").textContent()).trim(), "Saved.");
  assert.match(await page.locator(".props").textContent(), /May introspect\s*yes/);
  assert.equal((await token(clientId, secret, owner.username, owner.password)).status, 200);

  // Regenerating asks first and says the old secret stops working; Cancel keeps it.
  await page.getByRole("link", { name: "Regenerate secret" }).click();
  assert.match(await page.textContent("main"), /stops working at once/);
  await page.getByRole("link", { name: "Cancel" }).click();
  assert.equal((await token(clientId, secret, owner.username, owner.password)).status, 200);

  // Regenerating for real: the new secret is shown once, the old one is refused at once.
  await page.getByRole("link", { name: "Regenerate secret" }).click();
  await page.getByRole("button", { name: "Yes, regenerate it" }).click();
  await page.locator("#client-secret").waitFor();
  const regenerated = await page.locator("#client-secret").inputValue();
  assert.equal(regenerated.length, 43);
  assert.notEqual(regenerated, secret);
  assert.equal((await token(clientId, secret, owner.username, owner.password)).status, 401);
  assert.equal((await token(clientId, regenerated, owner.username, owner.password)).status, 200);
  await page.reload();
  await page.locator("#secret-fingerprint").waitFor();
  assert.equal(await page.locator("#client-secret").count(), 0);

  // Delete, after the confirmation page.
  await page.getByRole("link", { name: "Delete" }).click();
  await page.getByRole("button", { name: "Yes, delete it" }).click();
  await page.waitForURL(`${base}/o/applications/`);
  assert.equal(await page.getByRole("link", { name: "Browser app v2" }).count(), 0);
  const refused = await token(clientId, regenerated, owner.username, owner.password);
  assert.equal(refused.status, 401);
  assert.equal(refused.body.error, "invalid_client");

  // Sign out: the pages want a sign-in again.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.goto(`${base}/o/applications/`);
  assert.equal(new URL(page.url()).pathname, "/accounts/login/");
  return { client_id: clientId, access_token: granted.body.access_token };
}

async function admin(page) {
  await page.goto(`${base}/admin/users/`);
  await signIn(page, env("SUPERUSER"), env("SUPERUSER_PASSWORD"));
  assert.equal(new URL(page.url()).pathname, "/admin/users/");

  await page.getByRole("link", { name: "Add a user" }).click();
  await page.getByLabel("Username").fill("carol");
  await page.getByLabel("Password", { exact: true }).fill("carol-password");
  await page.getByLabel("Password again").fill("carol-password");
  await page.getByLabel("Email").fill("carol@example.org");
  await page.getByLabel("First name").fill("Carol");
  await page.getByLabel("Last name").fill("Jones");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("heading", { name: "User carol" }).waitFor();
  assert.ok(await page.locator("#is_active").isChecked(), "new users are active");

  await page.getByRole("link", { name: "Admin", exact: true }).click();
  await page.getByRole("link", { name: /Groups/ }).click();
  await page.getByLabel("New group").fill("readers");
  await page.getByRole("button", { name: "Create group" }).click();
  await page.getByRole("heading", { name: "Group “readers”" }).waitFor();
  await page.getByLabel("Add a member by username").fill("carol");
  await page.getByRole("button", { name: "Add", exact: true }).click();
  await page.locator(".members").getByRole("link", { name: "carol" }).waitFor();

  await page.goto(`${base}/admin/users/`);
  await page.getByRole("link", { name: "carol" }).waitFor();
  await page.screenshot({ path: join(shots, "admin-users.png"), fullPage: true });
  await page.getByLabel("Search users").fill("jones");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/q=jones/);
  assert.equal(await page.locator("tbody tr").count(), 1);

  const granted = await token(env("CLIENT_ID"), env("CLIENT_SECRET"), "carol", "carol-password");
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  return { access_token: granted.body.access_token };
}

const run = async (page) => {
  const scenarioRun = { applications, admin }[scenario];
  if (!scenarioRun) throw new Error(`unknown scenario "${scenario}" (applications or admin)`);
  return scenarioRun(page);
};
await runScenario({ browser, watchdog, shots, scenario, run });
