//! YAML from files and people we do not control, read within limits: a size cap, a nesting depth
//! cap and a bound on the nodes aliases expand to, all checked by a streaming pass that stops at
//! the first breach, before `serde_yaml_ng` builds anything.
//!
//! Why a pass of its own: libyaml (under `serde_yaml_ng`) scans the whole document before the
//! deserializer's recursion limit is consulted, and its scanner is quadratic in flow nesting
//! (`a: [[[…]]]` 100,000 levels deep, 200 KB, took 38 s). The pre-pass (`saphyr-parser`, a
//! pure-Rust event parser) stops at level 129, so hostile input costs milliseconds and a
//! bounded amount of memory. Every binary's configuration, the route rules and `proxy inject`
//! read YAML through here.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use saphyr_parser::{Event, Parser, ScanError};
use serde::de::DeserializeOwned;

/// A key that takes one string or a list of them (`typ: JWT`, `typ: [at+jwt, JWT]`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, in order.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(list) => list.clone(),
        }
    }
}

/// What a document may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Size of the whole text, in bytes.
    pub max_bytes: usize,
    /// Collections (mappings and sequences) open at once, aliases counted at their expansion.
    pub max_depth: usize,
    /// Nodes that aliases add when expanded, summed over the text (the "billion laughs" bound).
    pub max_alias_nodes: usize,
}

impl Limits {
    /// 16 MiB, 128 levels, 100,000 nodes from aliases: far above any configuration or manifest
    /// we have seen, far below what costs noticeable time or memory.
    pub const DEFAULT: Limits = Limits {
        max_bytes: 16 << 20,
        max_depth: 128,
        max_alias_nodes: 100_000,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// YAML refused. `Display` is the message for the operator (the caller adds the file name).
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error("cannot read: {0}")]
    Read(#[from] std::io::Error),
    #[error("{size} bytes or more, above the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("line {line} column {column}: nested deeper than {max} levels")]
    TooDeep {
        line: usize,
        column: usize,
        max: usize,
    },
    #[error("line {line} column {column}: aliases expand to more than {max} nodes")]
    TooManyAliasNodes {
        line: usize,
        column: usize,
        max: usize,
    },
    /// Not YAML (the pre-pass's or `serde_yaml_ng`'s message, with the location), or not the
    /// shape the caller asked for (`serde_yaml_ng`'s message: unknown field, wrong type).
    #[error("{0}")]
    Syntax(String),
}

/// Reads a whole file, refusing it unread when its size is over the limit.
pub fn read_file(path: &Path, limits: &Limits) -> Result<String, YamlError> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size > limits.max_bytes as u64 {
        return Err(YamlError::TooLarge {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            max: limits.max_bytes,
        });
    }
    // A file that grows while it is read still stops at the limit.
    read_into(file, limits, size as usize + 1)
}

/// Reads a whole stream (standard input, a file), stopping one byte past the size limit.
pub fn read(reader: impl Read, limits: &Limits) -> Result<String, YamlError> {
    // Room for the whole limit at once: growing by doubling would copy, and hold twice the limit
    // at the moment of the last copy. Pages never written cost no memory.
    read_into(reader, limits, limits.max_bytes + 1)
}

fn read_into(reader: impl Read, limits: &Limits, capacity: usize) -> Result<String, YamlError> {
    let mut bytes = Vec::with_capacity(capacity.min(limits.max_bytes + 1));
    reader
        .take(limits.max_bytes as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > limits.max_bytes {
        return Err(YamlError::TooLarge {
            size: bytes.len(),
            max: limits.max_bytes,
        });
    }
    String::from_utf8(bytes).map_err(|e| YamlError::Syntax(format!("not UTF-8: {e}")))
}

/// One YAML document deserialized into `T`, after [`check`] with the default limits.
pub fn from_str<T: DeserializeOwned>(src: &str) -> Result<T, YamlError> {
    check(src, &Limits::DEFAULT)?;
    serde_yaml_ng::from_str(src).map_err(|e| YamlError::Syntax(e.to_string()))
}

/// Every document of a multi-document stream (`---` separated), after [`check`]; an error
/// names the document (1-based) it is in.
pub fn documents(src: &str, limits: &Limits) -> Result<Vec<serde_yaml_ng::Value>, YamlError> {
    use serde::Deserialize;
    check(src, limits)?;
    serde_yaml_ng::Deserializer::from_str(src)
        .enumerate()
        .map(|(index, document)| {
            serde_yaml_ng::Value::deserialize(document)
                .map_err(|e| YamlError::Syntax(format!("document {}: {e}", index + 1)))
        })
        .collect()
}

/// The size, depth and alias limits, checked in one streaming pass that stops at the first
/// breach (or syntax error).
pub fn check(src: &str, limits: &Limits) -> Result<(), YamlError> {
    if src.len() > limits.max_bytes {
        return Err(YamlError::TooLarge {
            size: src.len(),
            max: limits.max_bytes,
        });
    }
    let mut walk = Walk::new(limits);
    for event in Parser::new_from_str(src) {
        let (event, span) = event.map_err(|e| scan_error(e, limits))?;
        let (line, column) = (span.start.line(), span.start.col() + 1);
        walk.event(event).map_err(|breach| match breach {
            Breach::Depth => YamlError::TooDeep {
                line,
                column,
                max: limits.max_depth,
            },
            Breach::AliasNodes => YamlError::TooManyAliasNodes {
                line,
                column,
                max: limits.max_alias_nodes,
            },
        })?;
    }
    Ok(())
}

/// The pre-pass's own error. Its scanner reads ahead of the events and counts flow levels in a
/// byte, so nesting past 255 levels can stop it before [`Walk`] sees level 129: a depth error too.
fn scan_error(e: ScanError, limits: &Limits) -> YamlError {
    let (line, column) = (e.marker().line(), e.marker().col() + 1);
    if e.info() == "recursion limit exceeded" {
        return YamlError::TooDeep {
            line,
            column,
            max: limits.max_depth,
        };
    }
    YamlError::Syntax(format!("line {line} column {column}: {}", e.info()))
}

enum Breach {
    Depth,
    AliasNodes,
}

/// What an anchored node amounts to when an alias repeats it.
#[derive(Clone, Copy)]
struct Anchored {
    /// Nodes in it, its own aliases expanded.
    nodes: usize,
    /// Collections nested in it, itself included (0 for a scalar).
    depth: usize,
}

/// A collection being read.
struct Open {
    anchor: usize,
    nodes_before: usize,
    /// The deepest level reached inside it, aliases expanded (absolute).
    deepest: usize,
}

/// The state of [`check`]'s pass over the events.
struct Walk<'a> {
    limits: &'a Limits,
    open: Vec<Open>,
    anchors: HashMap<usize, Anchored>,
    /// Nodes seen so far, aliases expanded.
    nodes: usize,
    /// Nodes added by aliases so far.
    alias_nodes: usize,
}

impl<'a> Walk<'a> {
    fn new(limits: &'a Limits) -> Self {
        Walk {
            limits,
            open: Vec::new(),
            anchors: HashMap::new(),
            nodes: 0,
            alias_nodes: 0,
        }
    }

    fn event(&mut self, event: Event<'_>) -> Result<(), Breach> {
        match event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let depth = self.open.len() + 1;
                if depth > self.limits.max_depth {
                    return Err(Breach::Depth);
                }
                self.open.push(Open {
                    anchor,
                    nodes_before: self.nodes,
                    deepest: depth,
                });
                self.nodes += 1;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(closed) = self.open.pop() else {
                    return Ok(());
                };
                if let Some(parent) = self.open.last_mut() {
                    parent.deepest = parent.deepest.max(closed.deepest);
                }
                if closed.anchor != 0 {
                    let depth = closed.deepest - self.open.len();
                    let nodes = self.nodes - closed.nodes_before;
                    self.anchors
                        .insert(closed.anchor, Anchored { nodes, depth });
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                self.nodes += 1;
                if anchor != 0 {
                    self.anchors.insert(anchor, Anchored { nodes: 1, depth: 0 });
                }
            }
            Event::Alias(anchor) => {
                let Some(target) = self.anchors.get(&anchor).copied() else {
                    return Ok(()); // an unknown anchor is the deserializer's error to report
                };
                let reach = self.open.len() + target.depth;
                if reach > self.limits.max_depth {
                    return Err(Breach::Depth);
                }
                if let Some(parent) = self.open.last_mut() {
                    parent.deepest = parent.deepest.max(reach);
                }
                self.nodes = self.nodes.saturating_add(target.nodes);
                self.alias_nodes = self.alias_nodes.saturating_add(target.nodes);
                if self.alias_nodes > self.limits.max_alias_nodes {
                    return Err(Breach::AliasNodes);
                }
            }
            Event::DocumentStart(_) => self.anchors.clear(),
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn flow_nesting(levels: usize) -> String {
        format!("a: {}{}\n", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_is_limited_at_128_levels_flow_or_block() {
        // `a:` is the first level.
        assert!(check(&flow_nesting(127), &Limits::DEFAULT).is_ok());
        let error = check(&flow_nesting(128), &Limits::DEFAULT).unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 1 column 131: nested deeper than 128 levels"
        );
        let block = format!("a:\n  {}x\n", "- ".repeat(200));
        assert!(matches!(
            check(&block, &Limits::DEFAULT),
            Err(YamlError::TooDeep { line: 2, .. })
        ));
    }

    #[test]
    fn deep_nesting_is_refused_at_once() {
        // 100,000 levels (200 KB) took 38 s in libyaml alone (issue 21, item 7).
        let started = Instant::now();
        let error = from_str::<serde_yaml_ng::Value>(&flow_nesting(100_000)).unwrap_err();
        assert!(matches!(error, YamlError::TooDeep { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn aliases_count_at_their_expansion() {
        // Each level nine aliases of the one before: 9^9 nodes from a few hundred bytes.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ('a'..='h').zip('b'..='i') {
            bomb.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 9].join(", ")
            ));
        }
        let error = check(&bomb, &Limits::DEFAULT).unwrap_err();
        assert!(
            matches!(error, YamlError::TooManyAliasNodes { line: 6, .. }),
            "{error}"
        );
        // Depth through aliases: an anchored 100-level list put 40 levels down.
        let deep = format!(
            "a: &d {}{}\nb: {}*d{}\n",
            "[".repeat(100),
            "]".repeat(100),
            "[".repeat(40),
            "]".repeat(40)
        );
        assert!(matches!(
            check(&deep, &Limits::DEFAULT),
            Err(YamlError::TooDeep { line: 2, .. })
        ));
        // Ordinary use of anchors is fine.
        let merge = "base: &base { a: 1, b: 2 }\nuse: { <<: *base, c: 3 }\n";
        assert!(from_str::<serde_yaml_ng::Value>(merge).is_ok());
    }

    #[test]
    fn size_is_limited_before_reading_on() {
        let small = Limits {
            max_bytes: 10,
            ..Limits::DEFAULT
        };
        let error = read(&b"a: 1234567890"[..], &small).unwrap_err();
        assert_eq!(
            error.to_string(),
            "11 bytes or more, above the limit of 10 bytes"
        );
        assert_eq!(read(&b"a: 1"[..], &small).unwrap(), "a: 1");
        assert!(matches!(
            check("a: 1234567890", &small),
            Err(YamlError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_file_over_the_limit_is_refused_unread() {
        let path = std::env::temp_dir().join(format!("tg-yaml-big-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(100 << 20).unwrap(); // sparse: nothing to read would come back quickly
        let error = read_file(&path, &Limits::DEFAULT).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            error.to_string(),
            "104857600 bytes or more, above the limit of 16777216 bytes"
        );
    }

    #[test]
    fn documents_are_read_one_by_one_and_errors_name_them() {
        let docs = documents("a: 1\n---\nb: 2\n", &Limits::DEFAULT).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"], 2);
        let error = documents("a: 1\n---\nb: !!int x\n", &Limits::DEFAULT).unwrap_err();
        assert!(error.to_string().starts_with("document 2: "), "{error}");
        let error = check("a: [\n", &Limits::DEFAULT).unwrap_err();
        assert!(error.to_string().starts_with("line "), "{error}");
    }

    #[test]
    fn the_repositorys_own_yaml_passes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut seen = 0;
        for dir in ["config", "deploy/kubernetes", "proxy/tests/inject", "."] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                    let text = read_file(&path, &Limits::DEFAULT).unwrap();
                    check(&text, &Limits::DEFAULT)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    seen += 1;
                }
            }
        }
        assert!(seen >= 5, "{seen} files");
    }
}
