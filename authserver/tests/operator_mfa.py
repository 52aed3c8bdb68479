"""Operators and second factors, driven as people would (requests, pyotp as the app):

1. An application that requires a second factor refuses a user who has none (access_denied to
   the client); once they enrol, their password-only session is asked for the code, and the
   token says urn:tokengate:acr:mfa.
2. A superuser resets that user's factor from the admin: the user's browser session ends, their
   token goes inactive, and they sign in with their password alone again.
3. On a server with require_mfa_for_staff (STAFF_BASE, same database): the superuser without a
   factor is sent to set one up; with one but a password-only session, to sign in again; after
   the code, the admin opens.

Usage: operator_mfa.py BASE STAFF_BASE CLIENT_ID CLIENT_SECRET REDIRECT ADMIN ADMIN_PASSWORD
                       USER USER_PASSWORD USER_ID INTROSPECTOR INTROSPECTOR_SECRET

Prints a JSON summary on its last line; exits non-zero at the first deviation.
"""

import base64
import hashlib
import html
import json
import re
import secrets
import sys
import time
import urllib.parse

import pyotp
import requests

(base, staff_base, client_id, client_secret, redirect_uri, admin, admin_password, user,
 user_password, user_id, introspector, introspector_secret) = sys.argv[1:13]


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def hidden(page, name):
    found = re.search(r'name="%s" value="([^"]*)"' % re.escape(name), page)
    if not found:
        fail(f"no hidden {name} in {page[:2000]}")
    return html.unescape(found.group(1))


class Person:
    def __init__(self, server, username, password):
        self.server, self.username, self.password = server, username, password
        self.browser = requests.Session()
        self.totp = None
        self.step = 0  # the last TOTP step used: each code is taken once

    def get(self, path):
        return self.browser.get(f"{self.server}{path}", allow_redirects=False, timeout=10)

    def code(self):
        self.step = max(self.step + 1, int(time.time()) // 30 - 1)
        return self.totp.at(self.step * 30)

    def sign_in(self, path="/accounts/login/?next=/o/authorized-tokens/"):
        """Fills in the sign-in form at `path`, and the code when asked; the last answer."""
        page = self.get(path).text
        answer = self.browser.post(
            f"{self.server}/accounts/login/",
            data={"csrf_token": hidden(page, "csrf_token"), "next": hidden(page, "next"),
                  "username": self.username, "password": self.password},
            allow_redirects=False, timeout=10)
        location = answer.headers.get("location", "")
        if answer.status_code == 303 and location.startswith("/accounts/login/code/"):
            page = self.get(location).text
            answer = self.browser.post(
                f"{self.server}/accounts/login/code/",
                data={"csrf_token": hidden(page, "csrf_token"), "next": hidden(page, "next"),
                      "code": self.code()},
                allow_redirects=False, timeout=10)
        if answer.status_code != 303:
            fail(f"sign-in of {self.username}: {answer.status_code} {answer.text[:1000]}")
        return answer

    def enrol(self):
        setup = self.get("/accounts/two-factor/").text
        uri = html.unescape(re.search(r'id="otpauth-uri" href="([^"]+)"', setup).group(1))
        self.totp = pyotp.parse_uri(uri)
        confirmed = self.browser.post(
            f"{self.server}/accounts/two-factor/",
            data={"csrf_token": hidden(setup, "csrf_token"), "action": "confirm",
                  "code": self.code()},
            timeout=10)
        if confirmed.status_code != 200 or 'id="recovery-codes"' not in confirmed.text:
            fail(f"enrolment of {self.username}: {confirmed.status_code}")

    def authorize(self):
        """An authorization (signing in again and consenting as asked): the client's answer
        (its query) and whether a sign-in was asked."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
            "scope": "openid read", "state": "st", "code_challenge": challenge,
            "code_challenge_method": "S256"})
        answer = self.get(f"/o/authorize/?{query}")
        signed_in = False
        for _ in range(6):
            location = answer.headers.get("location", "")
            if location.startswith(redirect_uri):
                break
            if location.startswith("/accounts/login/"):
                signed_in = True
                answer = self.sign_in(location)
            elif location:
                answer = self.get(location)
            elif 'name="decision"' in answer.text:
                fields = dict(re.findall(
                    r'<input type="hidden" name="([^"]+)" value="([^"]*)"', answer.text))
                fields = {k: html.unescape(v) for k, v in fields.items()}
                fields["decision"] = "allow"
                answer = self.browser.post(f"{self.server}/o/authorize/", data=fields,
                                           allow_redirects=False, timeout=10)
            else:
                fail(f"authorize: {answer.status_code} {answer.text[:1000]}")
        back = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        if "code" in back:
            tokens = requests.post(
                f"{self.server}/o/token/",
                data={"grant_type": "authorization_code", "code": back["code"],
                      "redirect_uri": redirect_uri, "code_verifier": verifier},
                auth=(client_id, client_secret), timeout=10).json()
            back["access_token"] = tokens["access_token"]
            back["introspection"] = introspect(tokens["access_token"])
        return back, signed_in


def introspect(token):
    return requests.post(f"{base}/o/introspect/", data={"token": token},
                         auth=(introspector, introspector_secret), timeout=10).json()


summary = {}
person = Person(base, user, user_password)
person.sign_in()
refused, _ = person.authorize()
summary["without_factor"] = {k: refused.get(k) for k in ("error", "error_description")}
person.enrol()
granted, signed_in = person.authorize()
summary["after_enrolment"] = {"signed_in_again": signed_in,
                              "acr": granted["introspection"].get("acr"),
                              "amr": granted["introspection"].get("amr")}

# A superuser resets the user's factor.
operator = Person(base, admin, admin_password)
operator.sign_in("/accounts/login/?next=/admin/")
user_page = operator.get(f"/admin/users/{user_id}/").text
summary["admin_saw_factor"] = 'id="two-factor">On' in user_page
reset = operator.browser.post(
    f"{base}/admin/users/{user_id}/two-factor/reset/",
    data={"csrf_token": hidden(user_page, "csrf_token")}, allow_redirects=True, timeout=10)
summary["reset_notice"] = "Second factor removed" in reset.text
summary["user_session_after_reset"] = person.get("/o/authorized-tokens/").status_code
summary["token_after_reset"] = introspect(granted["access_token"]).get("active")
person.totp = None
after = person.sign_in()
summary["password_alone_after_reset"] = after.headers["location"]

# require_mfa_for_staff, on the other server.
staff = Person(staff_base, admin, admin_password)
staff.sign_in("/accounts/login/?next=/admin/")
first = staff.get("/admin/")
summary["staff_without_factor"] = [first.status_code, first.headers.get("location")]
staff.enrol()
second = staff.get("/admin/")
summary["staff_password_session"] = [second.status_code, second.headers.get("location")]
staff.sign_in(second.headers["location"])
third = staff.get("/admin/")
summary["staff_after_code"] = third.status_code
print(json.dumps(summary))
