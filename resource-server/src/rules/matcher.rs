//! How a validated route matches a request path: exact, prefix, or a pattern of segments
//! (`{param}` = one non-empty segment, `*` last = the rest); and the paths that match nothing.

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Matcher {
    Exact(String),
    Prefix(String),
    Pattern(Vec<Segment>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Segment {
    Literal(String),
    Param,
    Rest,
}

impl Matcher {
    /// Whether `path` (already cut at `?`/`#`, no normalisation) matches.
    pub(super) fn matches(&self, path: &str) -> bool {
        match self {
            Matcher::Exact(p) => path == p,
            Matcher::Prefix(p) => path.starts_with(p.as_str()),
            Matcher::Pattern(segments) => pattern_matches(segments, path),
        }
    }
}

fn pattern_matches(pattern: &[Segment], path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let mut parts = rest.split('/');
    for seg in pattern {
        let Some(part) = parts.next() else {
            return false;
        };
        match seg {
            Segment::Rest => return true,
            Segment::Param if part.is_empty() => return false,
            Segment::Param => {}
            Segment::Literal(l) if l != part => return false,
            Segment::Literal(_) => {}
        }
    }
    parts.next().is_none()
}

/// Whether a path has a `.` or `..` segment (also percent-encoded): such paths match nothing.
/// (Read on every request: no allocation.)
pub(super) fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| {
        // One or two dots, each `.` or `%2e` in either case, and nothing else.
        let mut rest = seg.as_bytes();
        let mut dots = 0;
        while !rest.is_empty() {
            rest = match rest {
                [b'.', tail @ ..] => tail,
                [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
                _ => return false,
            };
            dots += 1;
        }
        dots == 1 || dots == 2
    })
}

/// `/a/{id}/*` into segments; the message says what is wrong.
pub(super) fn parse_pattern(p: &str) -> Result<Vec<Segment>, String> {
    let parts: Vec<&str> = p[1..].split('/').collect();
    let last = parts.len() - 1;
    let mut segs = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let seg = if *part == "*" {
            if i != last {
                return Err(format!("{p:?}: \"*\" may only be the last segment"));
            }
            Segment::Rest
        } else if let Some(inner) = part.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            if inner.is_empty() || !inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("{p:?}: bad parameter name {part:?}"));
            }
            Segment::Param
        } else if part.contains(['{', '}', '*']) {
            return Err(format!(
                "{p:?}: segment {part:?}: {{param}} and * must be whole segments"
            ));
        } else {
            Segment::Literal((*part).to_owned())
        };
        segs.push(seg);
    }
    Ok(segs)
}
