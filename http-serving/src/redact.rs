//! URLs fit for a log line or an error message: no password in them.

/// A database URL fit for a message: the password, if any, replaced by `***`, whether in the
/// user information (`user:pw@`) or in the query (`?password=…`, `sslpassword=…`, which libpq
/// and sqlx read too).
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let base = redact_userinfo(base);
    match query {
        None => base,
        Some(query) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _))
                        if name.eq_ignore_ascii_case("password")
                            || name.eq_ignore_ascii_case("sslpassword") =>
                    {
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{base}?{}", pairs.join("&"))
        }
    }
}

fn redact_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=require&Password=pw&sslpassword=k"),
            "postgres://u@h/db?sslmode=require&Password=***&sslpassword=***"
        );
        assert_eq!(
            redact_url("postgres://u:pw@h/db?password=x"),
            "postgres://u:***@h/db?password=***"
        );
        assert_eq!(redact_url("sqlite://data/a.db"), "sqlite://data/a.db");
    }
}
