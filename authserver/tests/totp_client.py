"""A person with an authenticator app nobody here wrote (pyotp): signs in with a password,
enrols TOTP from their own page (reads the otpauth:// URI the page shows, checks the QR code is
there), confirms it with a code one step behind (drift), then signs in again in fresh browsers:
a wrong code, the right code, the same code again (refused: never twice), the next step's code
(drift ahead), a recovery code, the same recovery code again, then wrong codes until the
throttle answers 429 (and a right code is refused too while it does).

Usage: totp_client.py BASE_URL USERNAME PASSWORD

Prints a JSON summary on its last line; exits non-zero at the first deviation.
"""

import html
import json
import re
import sys
import time

import pyotp
import requests

base, username, password = sys.argv[1:4]


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def hidden(page, name):
    found = re.search(r'name="%s" value="([^"]*)"' % re.escape(name), page)
    if not found:
        fail(f"no hidden {name} in {page[:2000]}")
    return html.unescape(found.group(1))


def sign_in_password(browser):
    """The password step; the response to the POST (not followed)."""
    page = browser.get(f"{base}/accounts/login/", timeout=10).text
    return browser.post(
        f"{base}/accounts/login/",
        data={
            "csrf_token": hidden(page, "csrf_token"),
            "next": "/o/authorized-tokens/",
            "username": username,
            "password": password,
        },
        allow_redirects=False,
        timeout=10,
    )


def submit_code(browser, code):
    page = browser.get(f"{base}/accounts/login/code/", timeout=10)
    if page.status_code != 200 or 'id="code-form"' not in page.text:
        fail(f"second step page: {page.status_code} {page.text[:500]}")
    return browser.post(
        f"{base}/accounts/login/code/",
        data={
            "csrf_token": hidden(page.text, "csrf_token"),
            "next": hidden(page.text, "next"),
            "code": code,
        },
        allow_redirects=False,
        timeout=10,
    )


def signed_in(browser):
    page = browser.get(f"{base}/o/authorized-tokens/", allow_redirects=False, timeout=10)
    return page.status_code == 200


summary = {}

# Enrolment, from the user's own page; another browser (a stolen session, say) signed in before.
other = requests.Session()
sign_in_password(other)
if not signed_in(other):
    fail("the other browser did not sign in")
browser = requests.Session()
first = sign_in_password(browser)
if first.status_code != 303 or "/accounts/login/code/" in first.headers.get("location", ""):
    fail(f"first sign-in (no factor yet): {first.status_code} {first.headers}")
setup = browser.get(f"{base}/accounts/two-factor/", timeout=10).text
uri = html.unescape(re.search(r'id="otpauth-uri" href="([^"]+)"', setup).group(1))
if 'id="totp-qr" src="data:image/svg+xml;base64,' not in setup:
    fail("no QR code on the enrolment page")
totp = pyotp.parse_uri(uri)
summary["uri_issuer"] = totp.issuer
summary["uri_name"] = totp.name
# Refreshing the page keeps the same secret until it is confirmed.
again = browser.get(f"{base}/accounts/two-factor/", timeout=10).text
if html.unescape(re.search(r'id="otpauth-uri" href="([^"]+)"', again).group(1)) != uri:
    fail("the enrolment secret changed on reload")
wrong_first = browser.post(
    f"{base}/accounts/two-factor/",
    data={"csrf_token": hidden(setup, "csrf_token"), "action": "confirm", "code": "000000"
          if totp.now() != "000000" else "111111"},
    timeout=10,
)
summary["confirm_wrong"] = wrong_first.status_code
confirmed = browser.post(
    f"{base}/accounts/two-factor/",
    data={
        "csrf_token": hidden(setup, "csrf_token"),
        "action": "confirm",
        # One step behind: an app whose clock is 30 s late still enrols.
        "code": totp.at(time.time() - 30),
    },
    timeout=10,
)
if confirmed.status_code != 200 or 'id="recovery-codes"' not in confirmed.text:
    fail(f"confirm: {confirmed.status_code} {confirmed.text[:2000]}")
recovery = re.findall(r"<li><code>([a-z0-9-]+)</code></li>", confirmed.text)
summary["recovery_codes"] = len(recovery)
# Enrolment ends the user's other sessions (a password alone no longer signs them in), not the
# one that enrolled.
summary["other_session_after_enrolment"] = signed_in(other)
summary["enrolling_session_after_enrolment"] = signed_in(browser)


def with_code(code):
    """A fresh browser: password, then `code`; (status of the code's POST, signed in?)."""
    b = requests.Session()
    step = sign_in_password(b)
    if step.status_code != 303 or not step.headers["location"].startswith("/accounts/login/code/"):
        fail(f"password step: {step.status_code} {step.headers}")
    answer = submit_code(b, code)
    return answer.status_code, signed_in(b), answer


now_code = totp.now()
summary["wrong"] = with_code("000000" if now_code != "000000" else "111111")[:2]
accepted = with_code(now_code)
summary["right"] = accepted[:2]
summary["right_location"] = accepted[2].headers.get("location")
summary["replayed"] = with_code(now_code)[:2]
summary["next_step"] = with_code(totp.at(time.time() + 30))[:2]
summary["recovery"] = with_code(recovery[0])[:2]
summary["recovery_again"] = with_code(recovery[0])[:2]

# The throttle: wrong codes until refused.
wrong_until_refused = 0
while True:
    status, _, answer = with_code("999999" if totp.now() != "999999" else "888888")
    if status == 429:
        summary["retry_after"] = answer.headers.get("retry-after")
        break
    if status != 400:
        fail(f"a wrong code: {status}")
    wrong_until_refused += 1
    if wrong_until_refused > 50:
        fail("never throttled")
summary["wrong_before_429"] = wrong_until_refused
summary["right_while_throttled"] = with_code(recovery[1])[:2]
print(json.dumps(summary))
