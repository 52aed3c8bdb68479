#!/usr/bin/env python3
"""Keys and JWT access tokens for bench/jwt.sh, minted by a third-party library stack.

Two keys from `cryptography`: Ed25519 (what tokengate's authserver signs with) and RSA 2048 (what
Keycloak, Auth0, Entra ID, Okta and Google sign with, RS256). Their JWKS is written by Authlib
(`authlib.jose`, as test-support/src/jwt_tokens.py does); the RFC 9068 access tokens
(`typ: at+jwt`, iss, aud, sub, client_id, iat, exp, jti, scope `read`) are signed with
`cryptography` directly: the JWS is a fixed header, a compact JSON payload and the signature, the
same bytes Authlib produces, but fast enough for a few hundred thousand tokens (RSA signing, about
1 ms a token, runs on every core). The first token of each kind is checked with Authlib's own
decoder.

Usage: jwt_tokens.py ISSUER AUDIENCE OUTDIR ROUNDS PER_ROUND RSA_PER_ROUND
Writes OUTDIR/jwks.json (both keys), OUTDIR/hit.txt (one EdDSA token: the cache-hit case),
OUTDIR/miss-<round>.txt (PER_ROUND distinct EdDSA tokens each, one per line) and
OUTDIR/rs-miss-<round>.txt (RSA_PER_ROUND distinct RS256 tokens each); no token appears twice
across all files. exp is 2 h ahead.
"""

import base64
import json
import multiprocessing
import os
import sys
import time
import warnings

warnings.simplefilter("ignore")  # authlib.jose's deprecation notice

from authlib.jose import JsonWebKey, jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Minter:
    """Tokens of one key: everything but jti is the same in every token."""

    def __init__(self, alg, kid, key, sign, issuer, audience, now, run):
        self.key, self.sign = key, sign
        self.header = b64(json.dumps({"alg": alg, "kid": kid, "typ": "at+jwt"}, separators=(",", ":")).encode())
        self.head = (f'{{"iss":{json.dumps(issuer)},"aud":{json.dumps(audience)},"sub":"bench",'
                     f'"client_id":"bench-client","iat":{now},"exp":{now + 7200},"scope":"read","jti":"{run}-')

    def __call__(self, serial: int) -> str:
        signing_input = self.header + "." + b64((self.head + f'{serial}"}}').encode())
        return signing_input + "." + b64(self.sign(self.key, signing_input.encode()))


def sign_ed(key, data):
    return key.sign(data)


def sign_rs(key, data):
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def public_jwk(key, kid, alg):
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = JsonWebKey.import_key(pem).as_dict(is_private=False)
    public.update({"kid": kid, "use": "sig", "alg": alg})
    return public


MINTER = None


def mint(serials):
    return [MINTER(s) for s in serials]


def main() -> None:
    global MINTER
    issuer, audience, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds, per_round, rsa_per_round = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    now, run = int(time.time()), os.urandom(6).hex()
    ed_key = ed25519.Ed25519PrivateKey.generate()
    rs_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys = [public_jwk(ed_key, "bench-ed", "EdDSA"), public_jwk(rs_key, "bench-rsa", "RS256")]
    with open(os.path.join(out, "jwks.json"), "w") as f:
        json.dump({"keys": keys}, f)
    ed = Minter("EdDSA", "bench-ed", ed_key, sign_ed, issuer, audience, now, run + "-ed")
    rs = Minter("RS256", "bench-rsa", rs_key, sign_rs, issuer, audience, now, run + "-rs")
    for minter, public in [(ed, keys[0]), (rs, keys[1])]:
        claims = jwt.decode(minter(0), JsonWebKey.import_key(public))
        claims.validate()
        assert claims["iss"] == issuer and claims["aud"] == audience, claims
    with open(os.path.join(out, "hit.txt"), "w") as f:
        f.write(ed(0) + "\n")
    for r in range(rounds):
        with open(os.path.join(out, f"miss-{r + 1}.txt"), "w") as f:
            first = 1 + r * per_round
            f.write("\n".join(ed(s) for s in range(first, first + per_round)) + "\n")
    MINTER = rs
    with multiprocessing.get_context("fork").Pool() as pool:
        for r in range(rounds):
            first = 1 + r * rsa_per_round
            chunks = [range(c, min(c + 1000, first + rsa_per_round)) for c in range(first, first + rsa_per_round, 1000)]
            with open(os.path.join(out, f"rs-miss-{r + 1}.txt"), "w") as f:
                for tokens in pool.imap(mint, chunks):
                    f.write("\n".join(tokens) + "\n")


if __name__ == "__main__":
    main()
