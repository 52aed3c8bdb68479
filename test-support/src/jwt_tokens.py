#!/usr/bin/env python3
"""Third-party-signed JWT access tokens for the resource-server, proxy and example-api tests.

Keys are generated with `cryptography`, JWKS and tokens made with Authlib's JOSE implementation
(`authlib.jose`), so the Rust validator is tested against another library's output. The
adversarial tokens (alg none, HS256 signed with the public key, tampering) are assembled by hand
from the same parts, as an attacker would.

Usage: jwt_tokens.py ISSUER AUDIENCE  -> one JSON object on stdout:
  {"jwks": {...}, "jwks_rotated": {...}, "now": N, "tokens": {name: token}}
`jwks` publishes rsa-a, ec-1, ed-1 and ec-short; `jwks_rotated` drops rsa-a and adds rsa-b.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import uuid
import warnings

warnings.simplefilter("ignore")  # authlib.jose's deprecation notice (joserfc is its successor)

from authlib.jose import JsonWebKey, jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(obj) -> str:
    return b64(json.dumps(obj, separators=(",", ":")).encode())


def pem(private_key) -> bytes:
    return private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_jwk(private_key, kid: str, alg: str) -> dict:
    key = JsonWebKey.import_key(pem(private_key))
    public = key.as_dict(is_private=False)
    public.update({"kid": kid, "use": "sig", "alg": alg})
    return public


def main() -> None:
    issuer, audience = sys.argv[1], sys.argv[2]
    now = int(time.time())

    rsa_a = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_b = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_1 = ec.generate_private_key(ec.SECP256R1())
    ed_1 = ed25519.Ed25519PrivateKey.generate()
    stray = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    # A P-256 key whose JWK, as Authlib writes it, has a coordinate shorter than 32 bytes (it
    # drops leading zero bytes; RFC 7518 wants the full size): about one key in 64.
    while True:
        ec_short = ec.generate_private_key(ec.SECP256R1())
        jwk = public_jwk(ec_short, "ec-short", "ES256")
        if any(len(base64.urlsafe_b64decode(jwk[c] + "=" * (-len(jwk[c]) % 4))) < 32 for c in "xy"):
            break

    jwks = {"keys": [public_jwk(rsa_a, "rsa-a", "RS256"), public_jwk(ec_1, "ec-1", "ES256"),
                     public_jwk(ed_1, "ed-1", "EdDSA"), jwk]}
    jwks_rotated = {"keys": [public_jwk(rsa_b, "rsa-b", "RS256"), public_jwk(ec_1, "ec-1", "ES256"),
                             public_jwk(ed_1, "ed-1", "EdDSA"), jwk]}

    def sign(key, alg: str, kid: str, claims: dict, typ: str = "at+jwt") -> str:
        header = {"alg": alg, "kid": kid, "typ": typ}
        return jwt.encode(header, claims, pem(key)).decode()

    def rfc9068(**overrides) -> dict:
        claims = {"iss": issuer, "aud": audience, "sub": "alice", "username": "alice",
                  "client_id": "app-1",
                  "exp": now + 600, "iat": now, "jti": str(uuid.uuid4()), "scope": "read write"}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    tokens = {}
    # Good tokens, one per algorithm.
    tokens["rs256"] = sign(rsa_a, "RS256", "rsa-a", rfc9068())
    tokens["es256"] = sign(ec_1, "ES256", "ec-1", rfc9068(scope="groups"))
    tokens["eddsa"] = sign(ed_1, "EdDSA", "ed-1", rfc9068(scope="read"))
    tokens["es256_short_coordinate"] = sign(ec_short, "ES256", "ec-short", rfc9068(scope="read"))
    tokens["rotated_in"] = sign(rsa_b, "RS256", "rsa-b", rfc9068(scope="read"))
    tokens["rotated_out"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(scope="read"))

    # Shaped like Keycloak's: typ JWT, scope string, azp, preferred_username, aud list, RS256.
    tokens["keycloak"] = sign(rsa_a, "RS256", "rsa-a", {
        "exp": now + 300, "iat": now, "auth_time": now, "jti": str(uuid.uuid4()),
        "iss": issuer, "aud": [audience, "account"], "sub": str(uuid.uuid4()), "typ": "Bearer",
        "azp": "shop-frontend", "session_state": str(uuid.uuid4()), "acr": "1",
        "realm_access": {"roles": ["offline_access", "uma_authorization"]},
        "scope": "openid profile email read write", "sid": str(uuid.uuid4()),
        "email_verified": True, "preferred_username": "alice", "email": "alice@example.com",
    }, typ="JWT")
    # Shaped like Entra ID's (v2): typ JWT, scp, azp and appid, no jti, RS256.
    tokens["entra"] = sign(rsa_a, "RS256", "rsa-a", {
        "aud": audience, "iss": issuer, "iat": now, "nbf": now, "exp": now + 300,
        "aio": "E2ZgYJg", "azp": "11111111-2222-3333-4444-555555555555",
        "appid": "11111111-2222-3333-4444-555555555555", "azpacr": "0", "name": "Alice",
        "oid": str(uuid.uuid4()), "preferred_username": "alice@contoso.example",
        "rh": "0.AAAA", "scp": ["read", "groups"], "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
        "tid": str(uuid.uuid4()), "uti": "AbCdEf", "ver": "2.0",
    }, typ="JWT")

    # The adversarial corpus: each must be refused with 401 invalid_token.
    good = rfc9068(scope="read")
    tokens["alg_none"] = b64json({"alg": "none", "typ": "at+jwt", "kid": "rsa-a"}) + "." + b64json(good) + "."
    public_pem = rsa_a.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input = b64json({"alg": "HS256", "typ": "at+jwt", "kid": "rsa-a"}) + "." + b64json(good)
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    tokens["hs256_public_key"] = signing_input + "." + b64(mac)
    tokens["wrong_iss"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(iss=issuer + "/evil"))
    tokens["wrong_aud"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(aud="another-api"))
    tokens["expired"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(exp=now - 3600, iat=now - 7200))
    tokens["not_yet_valid"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(nbf=now + 3600))
    tokens["unknown_kid"] = sign(stray, "RS256", "forged-kid", rfc9068())
    tokens["stray_key_known_kid"] = sign(stray, "RS256", "rsa-a", rfc9068())
    signed = tokens["rs256"].split(".")
    tokens["tampered_payload"] = ".".join(
        [signed[0], b64json(rfc9068(scope="read write groups admin")), signed[2]])
    sig = bytearray(base64.urlsafe_b64decode(signed[2] + "=" * (-len(signed[2]) % 4)))
    sig[10] ^= 0x01
    tokens["tampered_signature"] = ".".join([signed[0], signed[1], b64(bytes(sig))])
    tokens["wrong_typ"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(), typ="JWT")
    # Authlib adds typ: JWT when the header has none: this one is signed by hand.
    no_typ_input = b64json({"alg": "RS256", "kid": "rsa-a"}) + "." + b64json(rfc9068())
    no_typ_sig = rsa_a.sign(no_typ_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    tokens["missing_typ"] = no_typ_input + "." + b64(no_typ_sig)

    # JWT_TOKENS_BULK=N: N distinct EdDSA and N distinct RS256 tokens (benchmarks of cache misses).
    bulk = int(os.environ.get("JWT_TOKENS_BULK", "0"))
    for i in range(bulk):
        tokens[f"bulk_eddsa_{i}"] = sign(ed_1, "EdDSA", "ed-1", rfc9068(scope="read"))
        tokens[f"bulk_rs256_{i}"] = sign(rsa_a, "RS256", "rsa-a", rfc9068(scope="read"))

    json.dump({"jwks": jwks, "jwks_rotated": jwks_rotated, "now": now, "tokens": tokens}, sys.stdout)


if __name__ == "__main__":
    main()
