#!/usr/bin/env python3
"""Keys and JWT access tokens for bench/jwt.sh, minted by a third-party library stack.

An Ed25519 key from `cryptography`, its JWKS written by Authlib (`authlib.jose`, as
resource-server/tests/support/jwt_tokens.py does), and RFC 9068 access tokens (`typ: at+jwt`,
iss, aud, sub, client_id, iat, exp, jti, scope `read`) signed with `cryptography` directly: the
JWS is a fixed header, a compact JSON payload and the Ed25519 signature, the same bytes Authlib
produces, but fast enough for a few hundred thousand tokens. The first token is checked with
Authlib's own decoder.

Usage: jwt_tokens.py ISSUER AUDIENCE OUTDIR ROUNDS PER_ROUND
Writes OUTDIR/jwks.json, OUTDIR/hit.txt (one token: the cache-hit case) and
OUTDIR/miss-<round>.txt (PER_ROUND distinct tokens each, one per line; no token appears twice
across all files). exp is 2 h ahead.
"""

import base64
import json
import os
import sys
import time
import warnings

warnings.simplefilter("ignore")  # authlib.jose's deprecation notice

from authlib.jose import JsonWebKey, jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

KID = "bench-ed"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> None:
    issuer, audience, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds, per_round = int(sys.argv[4]), int(sys.argv[5])
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = JsonWebKey.import_key(pem).as_dict(is_private=False)
    public.update({"kid": KID, "use": "sig", "alg": "EdDSA"})
    with open(os.path.join(out, "jwks.json"), "w") as f:
        json.dump({"keys": [public]}, f)

    now = int(time.time())
    header = b64(json.dumps({"alg": "EdDSA", "kid": KID, "typ": "at+jwt"}, separators=(",", ":")).encode())
    # Everything but jti is the same in every token; jti = run prefix + serial number.
    run = os.urandom(6).hex()
    head = (f'{{"iss":{json.dumps(issuer)},"aud":{json.dumps(audience)},"sub":"bench",'
            f'"client_id":"bench-client","iat":{now},"exp":{now + 7200},"scope":"read","jti":"{run}-')

    def token(serial: int) -> str:
        signing_input = header + "." + b64((head + f'{serial}"}}').encode())
        return signing_input + "." + b64(key.sign(signing_input.encode()))

    first = token(0)
    claims = jwt.decode(first, JsonWebKey.import_key(public))
    claims.validate()
    assert claims["iss"] == issuer and claims["aud"] == audience, claims
    with open(os.path.join(out, "hit.txt"), "w") as f:
        f.write(first + "\n")
    serial = 1
    for r in range(1, rounds + 1):
        with open(os.path.join(out, f"miss-{r}.txt"), "w") as f:
            f.write("\n".join(token(s) for s in range(serial, serial + per_round)) + "\n")
        serial += per_round


if __name__ == "__main__":
    main()
