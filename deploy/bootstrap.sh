#!/usr/bin/env bash
# tokengate-bootstrap: makes a fresh database ready for the containers, and does nothing the second
# time. Run once before the proxy starts (compose's `bootstrap` service, Kubernetes' Job):
#   - the proxy's introspection client `tokengate-proxy` (client credentials, may introspect and
#     use the revocation stream),
#     whose secret is PROXY_CLIENT_SECRET, or else the file PROXY_CLIENT_SECRET_FILE (created with
#     a random secret when missing, mode 0600); an existing client whose secret differs gets
#     this one (`app delete` + `app create`), so the proxy and the database always agree;
#   - an administrator `admin` when there is no user yet, with ADMIN_PASSWORD or a random
#     password printed once to the log;
#   - when AUTHSERVER_SECRETS_SYSTEM_FILE names a missing file: a random secret there (0600),
#     which the JWT signing keys are encrypted with (before any authserver command reads it);
#   - on PostgreSQL, when API_DATABASE_PASSWORD or API_DATABASE_PASSWORD_FILE is set (the file
#     created with a random password when missing, 0600): the example API's login role
#     API_DATABASE_ROLE (default tokengate_api), limited to the user and group tables
#     (`authserver api-role`; the authserver's database user needs CREATEROLE).
# The authserver settings (AUTHSERVER_DATABASE_URL, ...) come from the environment as usual.
set -euo pipefail
AUTHSERVER=${AUTHSERVER:-authserver}
CLIENT_ID=tokengate-proxy

random_secret() { head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_'; }

# A new file of a random name (mktemp: created exclusively, 0600), never one planted there.
new_secret_file() {
  local tmp
  tmp=$(mktemp "$1.XXXXXX")
  random_secret > "$tmp" && mv "$tmp" "$1"
}

kek_file=${AUTHSERVER_SECRETS_SYSTEM_FILE:-}
if [ -n "$kek_file" ] && [ ! -s "$kek_file" ]; then
  new_secret_file "$kek_file"
  echo "bootstrap: new key-encryption secret in $kek_file"
fi

secret=${PROXY_CLIENT_SECRET:-}
if [ -z "$secret" ]; then
  file=${PROXY_CLIENT_SECRET_FILE:?set PROXY_CLIENT_SECRET or PROXY_CLIENT_SECRET_FILE}
  if [ ! -s "$file" ]; then
    new_secret_file "$file"
    echo "bootstrap: new proxy client secret in $file"
  fi
  secret=$(cat "$file")
fi

# The schema first: the other commands need an existing database.
"$AUTHSERVER" migrate >/dev/null

# The client is registered with this secret unless it already has it (the fingerprint `app list`
# shows is the first 8 hex digits of the secret's SHA-256).
register() {
  "$AUTHSERVER" app create --name "tokengate proxy (introspection)" --client-id "$CLIENT_ID" \
    --grant-type client-credentials --introspect --ssf --client-secret-stdin <<<"$secret" >/dev/null
}
wanted=$(printf %s "$secret" | sha256sum | cut -c1-8)
entry=$("$AUTHSERVER" app list --json | grep -o "{[^{}]*\"client_id\":\"$CLIENT_ID\"[^{}]*}" || true)
if [ -z "$entry" ]; then
  register
  echo "bootstrap: $CLIENT_ID registered"
elif [[ "$entry" == *"\"secret_fingerprint\":\"$wanted\""* ]]; then
  echo "bootstrap: $CLIENT_ID already registered with this secret"
else
  "$AUTHSERVER" app delete "$CLIENT_ID" >/dev/null
  register
  echo "bootstrap: $CLIENT_ID registered again with the given secret"
fi

api_password=${API_DATABASE_PASSWORD:-}
api_file=${API_DATABASE_PASSWORD_FILE:-}
if [ -z "$api_password" ] && [ -n "$api_file" ]; then
  if [ ! -s "$api_file" ]; then
    new_secret_file "$api_file"
    echo "bootstrap: new example API database password in $api_file"
  fi
  api_password=$(cat "$api_file")
fi
if [ -n "$api_password" ]; then
  "$AUTHSERVER" api-role "${API_DATABASE_ROLE:-tokengate_api}" <<<"$api_password"
fi

if [ "$("$AUTHSERVER" user list --json)" = "[]" ]; then
  password=${ADMIN_PASSWORD:-$(random_secret)}
  AUTHSERVER_PASSWORD=$password "$AUTHSERVER" createsuperuser --username admin >/dev/null
  if [ -z "${ADMIN_PASSWORD:-}" ]; then
    echo "bootstrap: administrator admin created, password: $password (shown once)"
  else
    echo "bootstrap: administrator admin created with ADMIN_PASSWORD"
  fi
else
  echo "bootstrap: users exist, no administrator created"
fi
