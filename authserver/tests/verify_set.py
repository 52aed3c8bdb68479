"""Verifies Security Event Tokens (RFC 8417) as an independent SSF receiver would.

Usage: verify_set.py JWKS_URL ISSUER AUDIENCE SET...

The JWKS is fetched over HTTP; PyJWT checks each SET's signature (by kid), alg, typ
(`secevent+jwt`), iss and aud, and that it carries iat, jti and exactly one event with an
`event_timestamp`. Prints a JSON list of the claims. Exits non-zero on any failure.
"""

import json
import sys

import jwt

REQUIRED = ["iss", "aud", "iat", "jti", "events"]


def main():
    jwks_url, issuer, audience, *sets = sys.argv[1:]
    keys = jwt.PyJWKClient(jwks_url, cache_keys=False, cache_jwk_set=False)
    out = []
    for token in sets:
        header = jwt.get_unverified_header(token)
        assert header["typ"] == "secevent+jwt", header
        assert header["alg"] == "EdDSA", header
        signing_key = keys.get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            signing_key.key,
            algorithms=["EdDSA"],
            audience=audience,
            issuer=issuer,
            options={"require": REQUIRED},
        )
        events = claims["events"]
        assert len(events) == 1, events
        ((event_type, body),) = events.items()
        # SSF's own events (verification) carry no event_timestamp; the CAEP ones do.
        if "/secevent/ssf/" not in event_type:
            assert isinstance(body["event_timestamp"], int), body
        assert "format" in claims["sub_id"], claims
        out.append(claims)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
