// DPoP (RFC 9449) with panva's oauth4webapi as the client, run by tests/dpop_clients.rs against
// the stack's front door (BASE_URL: the proxy; the authorization server behind it at /o/, the
// example API at /users/). Discovery, then for each algorithm (ES256, EdDSA): client
// credentials with a DPoP proof, the token used at the API through the proxy with a fresh proof
// per request; the password grant and a refresh with the same key; a refresh with another key
// refused. With NONCE=1 the authorization server requires nonces: the first token request is
// answered use_dpop_nonce, which oauth4webapi reports, and the retry carries the nonce.
// Prints one JSON summary line.
import * as oauth from 'oauth4webapi';

const base = process.env.BASE_URL;
const issuer = new URL(base);
const insecure = { [oauth.allowInsecureRequests]: true };
const summary = { algorithms: {}, nonce_retries: 0 };

const as = await oauth.processDiscoveryResponse(
  issuer,
  await oauth.discoveryRequest(issuer, { ...insecure, algorithm: 'oauth2' }),
);
summary.dpop_signing_alg_values_supported = as.dpop_signing_alg_values_supported;

/** Calls `request` (which makes a token request), retrying once on use_dpop_nonce. */
async function withNonceRetry(request, process) {
  try {
    return await process(await request());
  } catch (err) {
    if (oauth.isDPoPNonceError(err)) {
      summary.nonce_retries += 1;
      return await process(await request());
    }
    throw err;
  }
}

/** The API's status for `token` proven by `DPoP` (oauth4webapi throws on a challenge). */
async function api(token, DPoP, path = '/users/') {
  try {
    const response = await oauth.protectedResourceRequest(
      token, 'GET', new URL(path, base), new Headers(), null, { DPoP, ...insecure },
    );
    return response.status;
  } catch (err) {
    if (err instanceof oauth.WWWAuthenticateChallengeError) {
      summary.challenges = (summary.challenges ?? 0) + 1;
      return err.response.status;
    }
    throw err;
  }
}

for (const alg of ['ES256', 'EdDSA']) {
  const result = {};
  const keyPair = await oauth.generateKeyPair(alg);
  const service = { client_id: process.env.SERVICE_ID };
  const serviceAuth = oauth.ClientSecretBasic(process.env.SERVICE_SECRET);
  const DPoP = oauth.DPoP(service, keyPair);
  const cc = await withNonceRetry(
    () => oauth.clientCredentialsGrantRequest(as, service, serviceAuth, { scope: 'read' }, { DPoP, ...insecure }),
    (response) => oauth.processClientCredentialsResponse(as, service, response),
  );
  result.client_credentials_token_type = cc.token_type;
  result.api_first = await api(cc.access_token, DPoP);
  result.api_second = await api(cc.access_token, DPoP);
  // The token used without its proof (as a bearer token): refused.
  const bearer = await fetch(new URL('/users/', base), {
    headers: { authorization: `Bearer ${cc.access_token}` },
  });
  result.api_as_bearer = bearer.status;
  result.api_as_bearer_challenge = bearer.headers.get('www-authenticate');

  const user = { client_id: process.env.PASSWORD_ID };
  const userAuth = oauth.ClientSecretBasic(process.env.PASSWORD_SECRET);
  const UserDPoP = oauth.DPoP(user, keyPair);
  const granted = await withNonceRetry(
    () => oauth.genericTokenEndpointRequest(as, user, userAuth, 'password', {
      username: process.env.USERNAME, password: process.env.PASSWORD, scope: 'read',
    }, { DPoP: UserDPoP, ...insecure }),
    (response) => oauth.processGenericTokenEndpointResponse(as, user, response),
  );
  result.password_token_type = granted.token_type;
  result.api_password = await api(granted.access_token, UserDPoP);
  // A refresh with another key: refused (the refresh token is bound to the first).
  const otherKey = oauth.DPoP(user, await oauth.generateKeyPair(alg));
  try {
    await withNonceRetry(
      () => oauth.refreshTokenGrantRequest(as, user, userAuth, granted.refresh_token, { DPoP: otherKey, ...insecure }),
      (response) => oauth.processRefreshTokenResponse(as, user, response),
    );
    result.refresh_other_key = 'accepted';
  } catch (err) {
    result.refresh_other_key = err.error ?? String(err);
  }
  const refreshed = await withNonceRetry(
    () => oauth.refreshTokenGrantRequest(as, user, userAuth, granted.refresh_token, { DPoP: UserDPoP, ...insecure }),
    (response) => oauth.processRefreshTokenResponse(as, user, response),
  );
  result.refresh_token_type = refreshed.token_type;
  result.api_refreshed = await api(refreshed.access_token, UserDPoP);
  // The refreshed token with the other key's proofs: refused.
  result.api_other_key = await api(refreshed.access_token, otherKey);
  summary.algorithms[alg] = result;
}
console.log(JSON.stringify(summary));
