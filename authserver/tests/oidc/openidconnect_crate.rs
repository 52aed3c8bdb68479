//! The `openidconnect` crate (unmodified) as a relying party against the running server:
//! discovery, the authorization code flow with PKCE and a nonce (the browser's sign-in and
//! consent played over HTTP by the fixture), the code exchanged by the crate, the ID token
//! verified by its `IdTokenVerifier` (signature against the discovered JWKS, iss, aud, exp,
//! nonce) and its `at_hash` checked with `AccessTokenHash`, then UserInfo through the crate.
//! Once for an RS256 application (the default) and once for an EdDSA one; and the crate's own
//! refusals of a replayed ID token (its nonce not the new sign-in's), another audience and
//! another access token's hash.

use super::*;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreTokenResponse, CoreUserInfoClaims,
};
use openidconnect::{
    AccessTokenHash, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    RedirectUrl, Scope, TokenResponse,
};

/// The test server's issuer: a name the relying party's HTTP client resolves to the server
/// (as DNS would), so the crate checks discovery and ID tokens against the real issuer.
const ISSUER_HOST: &str = "op.tokengate.test";

/// A client made from the discovery document: the token and UserInfo endpoints may be there.
type RelyingParty = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

#[tokio::test]
async fn the_openidconnect_crate_as_relying_party() {
    let started = Fixture::start(testing::store().await, |s| {
        s.issuer = format!("http://{ISSUER_HOST}");
    })
    .await;
    let alice = started.user_id("alice").await;
    let update = authserver::store::UserUpdate {
        email: Some("alice@wonderland.example".into()),
        ..Default::default()
    };
    started.store.update_user(alice, &update).await.unwrap();
    let scopes = ["openid", "profile", "email"];
    let rs256 = started
        .client(ClientType::Confidential, true, &scopes)
        .await;
    let eddsa = started
        .client(ClientType::Confidential, true, &scopes)
        .await;
    let registration = OidcClient {
        id_token_alg: "EdDSA".into(),
        ..OidcClient::default()
    };
    started
        .store
        .set_oidc_client(eddsa.app_id, &registration)
        .await
        .unwrap();
    // Started again now that applications list `openid` and one chose EdDSA: both keys exist
    // before the relying party's first (and only) fetch of the JWKS, as in production.
    started.server.stop().await;
    let f = Fixture::start_again(started.store.clone(), |s| {
        s.issuer = format!("http://{ISSUER_HOST}");
    })
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(ISSUER_HOST, f.server.addr)
        .build()
        .unwrap();
    let issuer = IssuerUrl::new(f.issuer.clone()).unwrap();
    let metadata = CoreProviderMetadata::discover_async(issuer, &http)
        .await
        .expect("the crate accepts our discovery document and JWKS");
    let cookie = f.alice().await;

    let flow = async |rp: &RelyingParty| -> (CoreTokenResponse, Nonce) {
        let (challenge, pkce_verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = rp
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("profile".into()))
            .add_scope(Scope::new("email".into()))
            .set_pkce_challenge(challenge)
            .url();
        // The browser: the crate's URL, the consent page (the first time), allowed.
        let path = url.as_str().strip_prefix(f.issuer.as_str()).unwrap();
        let page = f.get(path, Some(&cookie)).await;
        let reply = if page.status == StatusCode::OK {
            f.decide(&cookie, &page, "allow").await
        } else {
            page
        };
        let answer = reply.redirected_to(REDIRECT);
        assert_eq!(answer.get("state"), Some(state.secret()));
        let code = AuthorizationCode::new(code_of(&answer));
        let tokens = rp
            .exchange_code(code)
            .unwrap()
            .set_pkce_verifier(pkce_verifier)
            .request_async(&http)
            .await
            .expect("the crate exchanges the code");
        (tokens, nonce)
    };
    let relying_party = |client: &Client| -> RelyingParty {
        CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(client.id.clone()),
            client.secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(RedirectUrl::new(REDIRECT.into()).unwrap())
    };

    let mut previous_access_token: Option<openidconnect::AccessToken> = None;
    for (client, other, alg) in [
        (
            &rs256,
            &eddsa,
            CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
        ),
        (&eddsa, &rs256, CoreJwsSigningAlgorithm::EdDsa),
    ] {
        let rp = relying_party(client);
        let (tokens, nonce) = flow(&rp).await;
        let id_token = tokens.id_token().expect("an ID token");
        let verifier = rp.id_token_verifier().set_allowed_algs([alg.clone()]);
        let claims = id_token
            .claims(&verifier, &nonce)
            .expect("the crate verifies the ID token");
        assert_eq!(claims.subject().as_str(), alice.to_string());
        assert!(claims.auth_time().is_some());
        assert_eq!(id_token.signing_alg().unwrap(), &alg);
        let key = id_token.signing_key(&verifier).unwrap();
        let at_hash = AccessTokenHash::from_token(tokens.access_token(), &alg, key).unwrap();
        assert_eq!(claims.access_token_hash(), Some(&at_hash));
        // at_hash binds it to this access token: the other application's does not match.
        if let Some(other_token) = &previous_access_token {
            let other_hash = AccessTokenHash::from_token(other_token, &alg, key).unwrap();
            assert_ne!(claims.access_token_hash(), Some(&other_hash));
        }
        // Another client's verifier refuses it (another audience).
        let other_rp = relying_party(other);
        let other_verifier = other_rp.id_token_verifier().set_allowed_algs([alg.clone()]);
        assert!(
            id_token.claims(&other_verifier, &nonce).is_err(),
            "an ID token for another audience passed"
        );
        // A replayed nonce: this ID token offered in a later sign-in (whose nonce is new) is
        // refused; the later sign-in's own ID token passes.
        let (later, later_nonce) = flow(&rp).await;
        assert!(
            id_token.claims(&verifier, &later_nonce).is_err(),
            "a replayed ID token passed"
        );
        let later_id_token = later.id_token().unwrap();
        assert!(later_id_token.claims(&verifier, &later_nonce).is_ok());
        assert!(later_id_token.claims(&verifier, &nonce).is_err());

        // UserInfo through the crate, for the ID token's subject.
        let info: CoreUserInfoClaims = rp
            .user_info(
                tokens.access_token().clone(),
                Some(claims.subject().clone()),
            )
            .unwrap()
            .request_async(&http)
            .await
            .expect("the crate reads UserInfo");
        assert_eq!(info.preferred_username().map(|u| u.as_str()), Some("alice"));
        assert_eq!(
            info.email().map(|e| e.as_str()),
            Some("alice@wonderland.example")
        );
        assert_eq!(info.email_verified(), Some(false));
        previous_access_token = Some(tokens.access_token().clone());
    }
    f.server.stop().await;
}
