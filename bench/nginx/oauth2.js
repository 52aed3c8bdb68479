// NGINX's documented njs handler for OAuth 2.0 token introspection (auth_request + js_content),
// with the same rule tokengate applies to bench/proxy.sh's route: an active token with scope
// `read`. 204 lets the request through; anything else refuses it.
function introspectAccessToken(r) {
    if (!r.variables.access_token) {
        r.return(401);
        return;
    }
    r.subrequest("/_oauth2_send_request", function (reply) {
        if (reply.status != 200) {
            r.return(401);
            return;
        }
        var answer = JSON.parse(reply.responseBody);
        var scopes = typeof answer.scope == "string" ? answer.scope.split(" ") : [];
        if (answer.active === true && scopes.indexOf("read") >= 0) {
            r.return(204);
        } else {
            r.return(403);
        }
    });
}

export default { introspectAccessToken };
