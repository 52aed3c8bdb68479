// tokengate passkeys: a form marked data-passkey="register" (the two-factor page) or "get" (the
// sign-in pages) first asks its data-options URL for the ceremony's options (posting the form's
// fields: its CSRF token, its mode), runs navigator.credentials.create() or .get(), puts the
// authenticator's answer (base64url) in the form's hidden fields, and submits it. The server
// checks everything; without WebAuthn in the browser the forms are hidden.
const fromBase64url = (text) => {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const padded = base64 + "===".slice((base64.length + 3) % 4);
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
};

const toBase64url = (buffer) => {
  let binary = "";
  for (const byte of new Uint8Array(buffer)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
};

const descriptors = (list) => (list || []).map((c) => ({ type: c.type, id: fromBase64url(c.id) }));

async function ceremony(form) {
  const response = await fetch(form.dataset.options, {
    method: "POST",
    body: new URLSearchParams(new FormData(form)),
    credentials: "same-origin",
  });
  const options = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(options.error || "The server refused to start (" + response.status + ").");
  const set = (name, value) => { form.elements[name].value = value; };
  if (form.dataset.passkey === "register") {
    const credential = await navigator.credentials.create({
      publicKey: {
        ...options,
        challenge: fromBase64url(options.challenge),
        user: { ...options.user, id: fromBase64url(options.user.id) },
        excludeCredentials: descriptors(options.excludeCredentials),
      },
    });
    set("credential_id", toBase64url(credential.rawId));
    set("client_data", toBase64url(credential.response.clientDataJSON));
    set("attestation_object", toBase64url(credential.response.attestationObject));
  } else {
    const credential = await navigator.credentials.get({
      publicKey: {
        ...options,
        challenge: fromBase64url(options.challenge),
        allowCredentials: descriptors(options.allowCredentials),
      },
    });
    set("credential_id", toBase64url(credential.rawId));
    set("client_data", toBase64url(credential.response.clientDataJSON));
    set("authenticator_data", toBase64url(credential.response.authenticatorData));
    set("signature", toBase64url(credential.response.signature));
    set("user_handle", credential.response.userHandle ? toBase64url(credential.response.userHandle) : "");
  }
  form.submit();
}

document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-passkey]");
  if (!form) return;
  event.preventDefault();
  const error = form.querySelector("[data-passkey-error]");
  if (error) error.hidden = true;
  ceremony(form).catch((why) => {
    if (!error) return;
    error.textContent = why && why.name === "NotAllowedError"
      ? "The passkey request was cancelled or timed out."
      : String((why && why.message) || why);
    error.hidden = false;
  });
});

document.addEventListener("DOMContentLoaded", () => {
  if (window.PublicKeyCredential) return;
  for (const form of document.querySelectorAll("form[data-passkey]")) form.hidden = true;
});
