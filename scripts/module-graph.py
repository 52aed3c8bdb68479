#!/usr/bin/env python3
"""The module graph of a crate and the structure rules it must keep.

For each crate named in LAYERS: every `crate::<module>` a source file mentions (in `use` lines and
paths alike) is an arrow from the file's top-level module to that module. The check fails on an
import circle between top-level modules, and on an arrow from a lower layer to a higher one.

Between files too: every `crate::…`, `super::…` and `self::…` path a file names is an arrow to the
deepest module file it reaches, and the check fails on an import circle between files. A module
and the modules inside it (`store/mod.rs` and `store/events.rs`) are one unit and not counted.

    scripts/module-graph.py           # check every crate; exit 1 naming what is wrong
    scripts/module-graph.py --print   # also print each crate's arrows
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(os.environ.get("MODULE_GRAPH_ROOT") or pathlib.Path(__file__).resolve().parent.parent)

# Top-level modules of each crate, lowest layer first: a module may use its own layer and the
# layers below it, never one above. `lib.rs`/`main.rs` stand above everything.
LAYERS = {
    "resource-server": [
        ["metrics", "bounded_body", "secret_file", "token_key"],
        ["bearer", "claims", "cors", "identity", "policy", "process", "introspection", "outage", "yaml", "config_error", "layers", "revoked", "dpop"],
        ["rules"],
        ["decision", "checker", "forwarded", "client_cert", "protected_resource"],
        ["audience", "dpop_gate"],
        ["jwt", "settings", "ssf"],
        ["gate_config", "access_log"],
        ["gate"],
    ],
    "authserver": [
        ["secrets", "private_files", "key_encryption", "client_ip", "request_log", "mtls"],
        ["domain"],
        ["config", "protocol", "store"],
        ["jwt", "throttle", "validation", "purge", "metrics"],
        ["registration"],
        ["oauth"],
        ["server", "cli", "testing"],
        ["web"],
    ],
    "http-serving": [
        ["redact", "request_log", "server", "shutdown"],
    ],
    "test-support": [
        ["ed25519_jwt", "fake_server", "jwks", "pki", "ssf_transmitter"],
    ],
    "example-api": [
        ["error", "id"],
        ["fields", "payload", "config"],
        ["groups", "users", "guard"],
        ["routes"],
    ],
    "proxy": [
        ["h2_conn", "waiting"],
        ["downstream", "tls", "ingress", "scope_check"],
        ["headers", "drain", "metrics", "app_probes", "request_id"],
        ["config", "inject"],
        ["balance"],
        ["state"],
        ["gateway", "admin", "background", "forward_auth", "scrape"],
        ["server"],
    ],
}

USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
BRACED = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)


def top_module(src: pathlib.Path, path: pathlib.Path) -> str:
    rel = path.relative_to(src)
    name = rel.parts[0]
    return name[:-3] if name.endswith(".rs") else name


def arrows(crate: str) -> dict:
    src = ROOT / crate / "src"
    graph: dict = {}
    for path in sorted(src.rglob("*.rs")):
        here = top_module(src, path)
        if here in ("lib", "main", "tests"):
            continue
        text = path.read_text()
        # Test modules may reach anywhere; comments (doc links) are not arrows.
        text = text.split("#[cfg(test)]")[0]
        text = "\n".join(l.split("//")[0] for l in text.splitlines())
        targets = set(USE.findall(text))
        for group in BRACED.findall(text):
            targets.update(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        for target in targets:
            if target != here and (src / f"{target}.rs").exists() or (src / target).is_dir():
                if target != here:
                    graph.setdefault(here, set()).add(target)
    return graph


PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)(?:::\{([^;}]*)\})?")


def module_files(src: pathlib.Path) -> dict:
    """Module path (a tuple of names; () for lib.rs/main.rs) to its file."""
    found = {}
    for path in src.rglob("*.rs"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts in (["lib"], ["main"]):
            parts = []
        found[tuple(parts)] = path
    return found


def file_arrows(crate: str) -> dict:
    """Arrows between the module files of `crate`, none between a module and one inside it."""
    src = ROOT / crate / "src"
    files = module_files(src)
    graph: dict = {}

    def deepest(path: list):
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in files:
                return tuple(path[:n])
        return None

    for here, path in files.items():
        text = path.read_text().split("#[cfg(test)]")[0]
        text = "\n".join(l.split("//")[0] for l in text.splitlines())
        for found in PATH.finditer(text):
            segments = found.group(1).split("::")
            if segments[0] == "crate":
                base, rest = [], segments[1:]
            else:
                base, rest = list(here), segments
                while rest and rest[0] in ("super", "self"):
                    if rest[0] == "super":
                        base = base[:-1]
                    rest = rest[1:]
            targets = [base + rest]
            for item in re.findall(r"(?:^|,)\s*([A-Za-z_][A-Za-z0-9_:]*)", found.group(2) or ""):
                targets.append(base + rest + item.split("::"))
            for target in targets:
                there = deepest(target)
                if there is None or there[: len(here)] == here or here[: len(there)] == there:
                    continue
                graph.setdefault(here, set()).add(there)
    return graph


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    show = "--print" in sys.argv
    problems = []
    for crate, layers in LAYERS.items():
        level = {m: i for i, layer in enumerate(layers) for m in layer}
        graph = arrows(crate)
        upward = []
        for here, targets in sorted(graph.items()):
            for target in sorted(targets):
                if show:
                    print(f"{crate}: {here} -> {target}")
                for m in (here, target):
                    if m not in level:
                        problems.append(f"{crate}: module {m} has no layer in {__file__}")
                        level[m] = -1
                if level[here] >= 0 and level[target] > level[here]:
                    upward.append(f"{here} -> {target}")
        for u in upward:
            problems.append(f"{crate}: arrow from a lower layer to a higher one: {u}")
        for c in circles(graph):
            problems.append(f"{crate}: import circle: {' <-> '.join(c)}")
        for c in circles(file_arrows(crate)):
            names = ["::".join(m) or "lib" for m in c]
            problems.append(f"{crate}: import circle between files: {' <-> '.join(sorted(names))}")
        if show:
            n = sum(len(t) for t in graph.values())
            print(f"{crate}: {n} arrows, {len(upward)} upward, {len(circles(graph))} circles")
    for p in sorted(set(problems)):
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
