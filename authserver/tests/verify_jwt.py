"""Verifies JWT access tokens as a third-party resource server would (RFC 9068 §4).

Usage: verify_jwt.py JWKS_URL ISSUER AUDIENCE TOKEN...

The JWKS is fetched over HTTP; PyJWT and authlib each check the signature (by kid), typ,
alg, iss, aud and exp, and must agree on the claims. Prints JSON: the JWKS Cache-Control,
the published kids, and each token's header and claims. Exits non-zero on any failure.
"""

import json
import sys
import urllib.request
import warnings

import jwt

# authlib.jose announces its successor (joserfc) on import; the module works as before.
warnings.filterwarnings("ignore", message="authlib.jose module is deprecated")
from authlib.jose import JsonWebKey  # noqa: E402
from authlib.jose import jwt as authlib_jwt  # noqa: E402

REQUIRED = ["iss", "sub", "aud", "exp", "iat", "jti", "client_id", "scope"]


def main():
    jwks_url, issuer, audience, *tokens = sys.argv[1:]
    with urllib.request.urlopen(jwks_url) as reply:
        jwks = json.load(reply)
        cache_control = reply.headers.get("Cache-Control")
    for key in jwks["keys"]:
        assert key["kty"] == "OKP" and key["crv"] == "Ed25519", key
        assert key["alg"] == "EdDSA" and key["use"] == "sig" and key["kid"], key
        assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}, key  # never the private "d"
    key_set = JsonWebKey.import_key_set(jwks)
    pyjwk = jwt.PyJWKClient(jwks_url, cache_keys=False, cache_jwk_set=False)
    out = []
    for token in tokens:
        header = jwt.get_unverified_header(token)
        assert header["typ"] == "at+jwt", header
        assert header["alg"] == "EdDSA", header
        signing_key = pyjwk.get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            signing_key.key,
            algorithms=["EdDSA"],
            audience=audience,
            issuer=issuer,
            options={"require": REQUIRED},
        )
        by_authlib = authlib_jwt.decode(
            token,
            key_set,
            claims_options={
                "iss": {"essential": True, "value": issuer},
                "aud": {"essential": True, "value": audience},
                "exp": {"essential": True},
            },
        )
        by_authlib.validate()
        assert dict(by_authlib) == claims, (dict(by_authlib), claims)
        out.append({"header": header, "claims": claims})
    print(
        json.dumps(
            {
                "cache_control": cache_control,
                "kids": [k["kid"] for k in jwks["keys"]],
                "tokens": out,
            }
        )
    )


if __name__ == "__main__":
    main()
