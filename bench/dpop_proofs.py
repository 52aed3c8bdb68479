#!/usr/bin/env python3
"""DPoP (RFC 9449) for the benches: a DPoP-bound token, and fresh proofs for the proxy.

A load generator sends one fixed header set, and every DPoP request needs a new proof (a new
`jti`, the proxy's replay cache refuses a second use): the proofs are made here beforehand and
sent round-robin, each once.

  token  --auth http://127.0.0.1:P --client ID:SECRET --username U --password W --scope read
         [--resource URI] --alg ES256|EdDSA --key-out FILE
         makes a key (kept in FILE, PEM), asks the token endpoint for a password-grant token
         bound to it (with a proof for the token endpoint) and prints the access token
  proofs --key FILE --token T --url URL [--method GET] -n N --out FILE
         writes N proofs for URL (each `jti` distinct, `iat` now, `ath` of T), one a line
  load   --key FILE --token T --url URL -n N -c CONNS
         sends N GET requests on CONNS keep-alive connections, each `Authorization: DPoP T` with
         a fresh proof (all made before the first is sent); fails unless every answer is 200
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.parse
import urllib.request

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key):
    if isinstance(key, ec.EllipticCurvePrivateKey):
        n = key.public_key().public_numbers()
        return {"kty": "EC", "crv": "P-256", "x": b64(n.x.to_bytes(32, "big")), "y": b64(n.y.to_bytes(32, "big"))}
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64(raw)}


class Signer:
    """Proofs of one key: the header encoded once, each payload signed."""

    def __init__(self, key):
        self.key = key
        self.es256 = isinstance(key, ec.EllipticCurvePrivateKey)
        header = {"typ": "dpop+jwt", "alg": "ES256" if self.es256 else "EdDSA", "jwk": public_jwk(key)}
        self.header = b64(json.dumps(header, separators=(",", ":")).encode())

    def sign(self, data: bytes) -> bytes:
        if not self.es256:
            return self.key.sign(data)
        r, s = decode_dss_signature(self.key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def proof(self, method: str, url: str, token=None, jti=None) -> str:
        claims = {"jti": jti or b64(os.urandom(12)), "htm": method, "htu": url, "iat": int(time.time())}
        if token is not None:
            claims["ath"] = b64(hashlib.sha256(token.encode()).digest())
        signing_input = f"{self.header}.{b64(json.dumps(claims, separators=(',', ':')).encode())}"
        return f"{signing_input}.{b64(self.sign(signing_input.encode()))}"

    def proofs(self, method: str, url: str, token: str, n: int):
        prefix = b64(os.urandom(9))
        return [self.proof(method, url, token, f"{prefix}{i}") for i in range(n)]


def load_key(path):
    with open(path, "rb") as f:
        return Signer(serialization.load_pem_private_key(f.read(), password=None))


def token(a):
    key = ec.generate_private_key(ec.SECP256R1()) if a.alg == "ES256" else ed25519.Ed25519PrivateKey.generate()
    with open(a.key_out, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    url = a.auth.rstrip("/") + "/o/token/"
    form = {"grant_type": "password", "username": a.username, "password": a.password, "scope": a.scope}
    if a.resource:
        form["resource"] = a.resource
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    request.add_header("Authorization", "Basic " + base64.b64encode(a.client.encode()).decode())
    request.add_header("DPoP", Signer(key).proof("POST", url))
    with urllib.request.urlopen(request) as answer:
        body = json.load(answer)
    if body.get("token_type") != "DPoP":
        sys.exit(f"not a DPoP-bound token: {body}")
    print(body["access_token"])


def proofs(a):
    lines = load_key(a.key).proofs(a.method, a.url, a.token, a.n)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


def load(a):
    signer = load_key(a.key)
    url = urllib.parse.urlsplit(a.url)
    all_proofs = signer.proofs("GET", a.url, a.token, a.n)
    conns = [http.client.HTTPConnection(url.hostname, url.port) for _ in range(a.c)]
    bad = 0
    for i, proof in enumerate(all_proofs):
        conn = conns[i % a.c]
        conn.request("GET", url.path or "/", headers={"Authorization": f"DPoP {a.token}", "DPoP": proof})
        answer = conn.getresponse()
        answer.read()
        bad += answer.status != 200
    if bad:
        sys.exit(f"{bad} of {a.n} requests not answered 200")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("token")
    for name in ("--auth", "--client", "--username", "--password", "--key-out"):
        t.add_argument(name, required=True)
    t.add_argument("--scope", default="read")
    t.add_argument("--resource")
    t.add_argument("--alg", choices=["ES256", "EdDSA"], default="ES256")
    for name, fn in (("proofs", proofs), ("load", load)):
        s = sub.add_parser(name)
        s.set_defaults(fn=fn)
        for arg in ("--key", "--token", "--url"):
            s.add_argument(arg, required=True)
        s.add_argument("-n", type=int, required=True)
        if name == "proofs":
            s.add_argument("--method", default="GET")
            s.add_argument("--out", required=True)
        else:
            s.add_argument("-c", type=int, default=4)
    t.set_defaults(fn=token)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
